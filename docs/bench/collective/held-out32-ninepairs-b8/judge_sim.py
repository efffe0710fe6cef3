"""The split judge (the installed ``SplitJudge``) on simulated forwards of 8 rows: each
forward's time scatters log-normally by 0.07 (one pair's scatter on this CPU,
``held-out32-near-b8/pair_trace.txt``), in spells of 50 forwards 0.85-1.2 times as slow,
with a split truly costing ``ratio`` of the whole. Per ratio, over 5 seeds of 40 chunks of
130 verifications (one configuration's category): the share of forwards run whole per
chunk (mean, 90th percentile, worst), and the cost against always choosing the cheaper.

Run: ``python docs/bench/collective/held-out32-ninepairs-b8/judge_sim.py``.
"""

import random
import statistics

from coinfer.decoding.split import SplitJudge


def run(ratio: float, seed: int, chunks: int = 40, noise: float = 0.07) -> tuple[list[float], float]:
    random.seed(seed)
    judge = SplitJudge()
    shares, whole, spell, cost, ideal = [], 0, 1.0, 0.0, 0.0
    for i in range(130 * chunks):
        if i % 50 == 0:
            spell = random.uniform(0.85, 1.2)
        split = judge.choose(8, True)
        base = 0.3 * spell * random.lognormvariate(0, noise)
        cost += base * (ratio if split else 1.0)
        ideal += base * min(ratio, 1.0)
        judge.measured(8, split, base * (ratio if split else 1.0))
        whole += not split
        if i % 130 == 129:
            shares.append(whole / 130)
            whole = 0
    return shares, cost / ideal


for ratio in (0.9, 0.95, 0.97, 1.0, 1.05, 1.1, 1.21):
    runs = [run(ratio, seed) for seed in range(5)]
    shares = sorted(x for s, _ in runs for x in s)
    print(
        f"split/whole {ratio}: whole share mean {statistics.mean(shares):.3f}"
        f" p90 {shares[int(0.9 * len(shares))]:.2f} worst {max(shares):.2f}"
        f" cost/ideal {statistics.mean(c for _, c in runs):.4f}"
    )
