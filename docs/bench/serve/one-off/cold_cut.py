"""Cold starts: each run a fresh speculator; logs every trim_together call (the cut) to find why
a run drafts next to nothing. Usage: cold_cut.py RUNS [FIRST,LAST]"""
import sys, json
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.cost_curve import CostCurve
from coinfer.decoding.ngram import NgramDrafter
sys.path.insert(0, "/work/main/docs/bench/serve/one-off")
from served_batch import open_served_batch, run_prompts

runs = int(sys.argv[1])
lo, hi = (int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "16,32").split(","))
chat, model, suite, _ = open_served_batch(11)
for r in range(runs):
    spec = BatchSpeculator.over(NgramDrafter(), CostCurve(), batch_floor=0.0)
    chat.speculator = spec
    pol = spec.sizer.policy
    calls = []
    tt = pol.trim_together
    def trim(proposals, passes=None, tt=tt, pol=pol, calls=calls):
        plain = [len(proposals)] if passes is None else passes([1] * len(proposals))
        stale = [n for n in plain if pol._stale(n)]
        out = tt(proposals, passes)
        calls.append({
            "w": len(proposals), "props": [(n, str(b)) for n, b in proposals if n],
            "plain": plain, "stale": stale, "ratio": round(pol.copy_miss_ratio(), 3),
            "fresh": {n: round(v * 1000) for n, v in sorted(pol._fresh().items())} if pol.costs else {},
            "keep": out, "rounds": pol._rounds,
        })
        return out
    pol.trim_together = trim
    jobs, wall = run_prompts(chat, suite, lo, hi, speculate=True)
    toks = sum(len(j.tokens) for j in jobs)
    drafted = sum(j.drafted for j in jobs)
    print(f"run {r + 1}: {toks / wall:.2f} tok/s ({toks} in {wall:.1f}s), drafted {drafted} kept {sum(j.accepted for j in jobs)}; cuts {len(calls)}, with proposals {sum(bool(c['props']) for c in calls)}, stale {sum(bool(c['stale']) for c in calls)}, kept>0 {sum(sum(c['keep']) > 0 for c in calls)}", flush=True)
    json.dump(calls, open(f"/tmp/cold/cuts_{r + 1}.json", "w"))
