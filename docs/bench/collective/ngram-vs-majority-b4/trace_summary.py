"""What the n-gram sizer cut in each traced run (``trace_b4.py``'s JSON): per run, the
rounds that drafted, and those that drafted nothing while some but not all of the
batch's requests held a copy whose first 8 tokens were expected to hold at >= 0.8 (the
batch floor's doing: the request without one would have slowed); then one run's cuts.
Run: ``python trace_summary.py trace.json 1`` (``trace.json`` is ``tr2.log``'s trace)."""

import json
import sys

with open(sys.argv[1]) as f:
    log = json.load(f)
for i, run in enumerate(log):
    cuts = run["cuts"]
    drafted = blocked = 0
    for c in cuts:
        confident = [len(s) >= 8 and s[7] >= 0.8 for s in c["surv"]]
        if any(c["keep"]):
            drafted += 1
        elif any(confident) and not all(confident):
            blocked += 1
    print(
        f"run {i} {run['config']}: {len(cuts)} batched cuts, {drafted} drafted, {blocked} drafted nothing "
        f"while some (not all) requests held a confident copy; forwards {run['shapes']}"
    )
run = log[int(sys.argv[2])]
print(
    f"\nrun {sys.argv[2]}: round, tokens proposed per request, (match, warm),"
    " survival at 1/8/16/32 tokens, kept"
)
for c in run["cuts"]:
    surv = [
        "-" if not s else "/".join(f"{s[j - 1]:.2f}" for j in (1, 8, 16, 32) if j <= len(s))
        for s in c["surv"]
    ]
    buckets = [tuple(b) if b else None for b in c["buckets"]]
    print(c["round"], c["proposed"], buckets, surv, c["keep"])
