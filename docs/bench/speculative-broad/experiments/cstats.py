import json, sys, collections
from coinfer.decoding import NgramDrafter
d = NgramDrafter(horizon=200)
stats = collections.defaultdict(lambda: [0, 0])
for split in sys.argv[1:]:
    data = json.load(open(f"/tmp/exp/plain_{split}.json"))
    for v in data.values():
        prompt, plain = v["prompt"], v["plain"]
        prev = None
        for i in range(1, len(plain)):
            ctx = list(prompt) + plain[:i]
            lk = d._lookups.setdefault(0, type(d._lookups.get(0) or object)()) if False else None
            dr = d.propose(ctx, 48)
            warm = prev is not None and prev == plain[i - 1] if False else dr.bucket.warm if dr.tokens else None
            if not dr.tokens:
                continue
            # raw match: recompute
            m = dr.bucket.match
            for j, tok in enumerate(dr.tokens):
                if i + j >= len(plain): break
                L = m + j
                key = (min(L, 64), dr.bucket.warm)
                stats[key][0] += 1
                ok = tok == plain[i + j]
                stats[key][1] += ok
                if not ok: break
        d.forget(0)
out = collections.defaultdict(lambda: [0, 0])
for (L, w), (t, p) in stats.items():
    g = next(x for x in (64, 48, 32, 24, 16, 12, 8, 6, 5, 4, 3, 2, 1) if L >= x)
    out[(g, w)][0] += t; out[(g, w)][1] += p
for k in sorted(out):
    t, p = out[k]; print(k, f"{p}/{t}={p/t:.3f}")
