"""Does splitting 8 rows of one token into 4 + 4 pay on each category's real prompts?

8 sequences, each its own held-out prompt of the category (as a batch-8 workload holds
them), one token each; every plan timed once per round, 15 rounds after a warm one;
paired ratio = each round's split over the same round's whole. Also the price table's
way: 8 copies of the category's first prompt.
Run: ``python docs/bench/collective/held-out32-near-b8/split_own_prompts.py 15 [CATEGORY ...]``.
"""

import statistics
import sys
import time

from coinfer.bench.collective import CollectiveBenchConfig, bench_workload, load_bench_model

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
suite = bench_workload(CollectiveBenchConfig(out="x", suite="broad", split="held-out", per_category=32))
target = load_bench_model("qwen2.5-coder-1.5b", 4096 * 8)
by_cat = {}
for p in suite:
    by_cat.setdefault(p["category"], []).append(p["messages"])


def measure(prompts):
    seqs = [target.new_sequence() for _ in prompts]
    target.extend_many([(s, p) for s, p in zip(seqs, prompts, strict=False)], last_only=True)
    lens = [len(p) for p in prompts]

    def fw(group):
        t = time.perf_counter()
        target.extend_many([(seqs[i], prompts[i][5:6]) for i in group])
        return time.perf_counter() - t

    plans = {"8": [range(8)], "4+4": [range(4), range(4, 8)], "7+1": [range(7), range(7, 8)]}
    res = {k: [] for k in plans}
    for r in range(rounds + 1):
        for k, groups in plans.items():
            t = sum(fw(g) for g in groups)
            for s, n in zip(seqs, lens, strict=False):
                target.truncate(s, n)
            if r:
                res[k].append(t)
    for s in seqs:
        target.release(s)
    out = {k: round(1000 * statistics.median(v), 1) for k, v in res.items()}
    for split in ("4+4", "7+1"):
        out[split + "/8"] = round(
            statistics.median(a / b for a, b in zip(res[split], res["8"], strict=True)), 3
        )
    return out


cats = sys.argv[2:] or list(by_cat)
for c in cats:
    msgs = (by_cat[c] * 8)[:8]
    prompts = [target.chat_prompt(m) for m in msgs]
    real = measure(prompts)
    copies = measure([prompts[0]] * 8)
    print(c, "prompt lengths", [len(p) for p in prompts], flush=True)
    print("   own prompts :", real, flush=True)
    print("   first x 8   :", copies, flush=True)
target.close()
