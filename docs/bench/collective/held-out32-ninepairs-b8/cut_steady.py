"""Is an uneven cut of 8 rows (3 + 5) dearer than the even one (4 + 4)? In run S the
gated-off row's quote split its batches of 8 into 3 + 5, whose in-situ prices (146 and
210 ms) summed above two forwards of 4 rows (143 each).

8 sequences, each on one of the category's held-out prompts (repeated to make 8), one
token each; per step, 8 whole, 4 + 4 and 3 + 5 in turn, 26 steps (the first two left
out); paired ratios per step, then their median.
Run: ``python docs/bench/collective/held-out32-ninepairs-b8/cut_steady.py quote followup prose``.
"""

import statistics
import sys
import time

from coinfer.bench.collective import CollectiveBenchConfig, bench_workload, load_bench_model

suite = bench_workload(CollectiveBenchConfig(out="x", suite="broad", split="held-out", per_category=32))
target = load_bench_model("qwen2.5-coder-1.5b", 4096 * 8)
for cat in sys.argv[1:]:
    msgs = ([p["messages"] for p in suite if p["category"] == cat] * 8)[:8]
    prompts = [target.chat_prompt(m) for m in msgs]
    seqs = [target.new_sequence() for _ in prompts]
    target.extend_many([(s, p) for s, p in zip(seqs, prompts, strict=False)], last_only=True)
    lens = [len(p) for p in prompts]
    plans = {"8": [range(8)], "4+4": [range(4), range(4, 8)], "3+5": [range(3), range(3, 8)]}
    res = {k: [] for k in plans}
    for step in range(26):
        for k, groups in plans.items():
            t = time.perf_counter()
            for g in groups:
                target.extend_many([(seqs[i], prompts[i][5 + step : 6 + step]) for i in g])
            res[k].append(time.perf_counter() - t)
            for s, n in zip(seqs, lens, strict=False):
                target.truncate(s, n)
    res = {k: v[2:] for k, v in res.items()}
    print(
        cat,
        {k: round(1000 * statistics.median(v), 1) for k, v in res.items()},
        "3+5 / 4+4:",
        round(statistics.median(a / b for a, b in zip(res["3+5"], res["4+4"], strict=False)), 3),
        "4+4 / 8:",
        round(statistics.median(a / b for a, b in zip(res["4+4"], res["8"], strict=False)), 3),
        "3+5 / 8:",
        round(statistics.median(a / b for a, b in zip(res["3+5"], res["8"], strict=False)), 3),
        flush=True,
    )
    for s in seqs:
        target.release(s)
