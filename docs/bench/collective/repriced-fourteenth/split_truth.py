"""Ground truth: at batch 8 of single tokens, does splitting 8 rows into two forwards pay?

Every plan (one forward, or two in turn) timed once per round, 15 rounds after a warm
one; the paired ratio is each round's split over the same round's whole.
Run: ``python docs/bench/collective/repriced-fourteenth/split_truth.py 15``.
"""

import statistics
import sys
import time

from coinfer.bench.collective import load_bench_model

target = load_bench_model("qwen2.5-coder-1.5b", 4096 * 8)
prompt = target.chat_prompt(
    [
        {
            "role": "user",
            "content": "Explain what a hash map is and how collisions are handled, with an example in Python. "
            * 6,
        }
    ]
)
print("prompt", len(prompt))
seqs = [target.new_sequence() for _ in range(8)]
target.extend_many([(s, prompt) for s in seqs], last_only=True)
tok = prompt[5:6]


def fw(group):
    t = time.perf_counter()
    target.extend_many([(s, tok) for s in group])
    return time.perf_counter() - t


def reset():
    for s in seqs:
        target.truncate(s, len(prompt))


plans = {
    "8": [seqs],
    "4+4": [seqs[:4], seqs[4:]],
    "3+5": [seqs[:3], seqs[3:]],
    "2+6": [seqs[:2], seqs[2:]],
    "7": [seqs[:7]],
    "3+4": [seqs[:3], seqs[3:7]],
    "6": [seqs[:6]],
    "3+3": [seqs[:3], seqs[3:6]],
    "5": [seqs[:5]],
    "4": [seqs[:4]],
    "3": [seqs[:3]],
    "1": [seqs[:1]],
}
res = {k: [] for k in plans}
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
for r in range(rounds + 1):
    for k, groups in plans.items():
        t = sum(fw(g) for g in groups)
        reset()
        if r:
            res[k].append(t)
med = {k: 1000 * statistics.median(v) for k, v in res.items()}
for k, v in med.items():
    print(k, round(v, 1), "ms  spread", round(1000 * min(res[k]), 1), round(1000 * max(res[k]), 1))
for split, whole in [("4+4", "8"), ("3+5", "8"), ("2+6", "8"), ("3+4", "7"), ("3+3", "6")]:
    ratios = [a / b for a, b in zip(res[split], res[whole])]
    print(
        split,
        "/",
        whole,
        "paired median",
        round(statistics.median(ratios), 3),
        "min",
        round(min(ratios), 3),
        "max",
        round(max(ratios), 3),
    )
