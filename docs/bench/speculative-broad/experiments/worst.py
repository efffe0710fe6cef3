import json, sys, functools
sys.path.insert(0, "/tmp/exp")
import sim
from coinfer.decoding.draft_length import AdaptiveDraftLength
data = json.load(open(sys.argv[1]))
kw = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
shared = {}
res = []
orig_cut = sim.DraftSizer.cut
log = []
def cut(self, key, at, draft):
    d = orig_cut(self, key, at, draft)
    if d.tokens: log.append((tuple(draft.bucket) if hasattr(draft.bucket, "_fields") else draft.bucket, len(d.tokens), at))
    return d
sim.DraftSizer.cut = cut
for name, v in data.items():
    log.clear()
    s = sim.simulate(v["prompt"], v["plain"], functools.partial(AdaptiveDraftLength, costs=shared, **kw))
    res.append((s, name, list(log)))
res.sort()
for s, name, lg in res[:6]:
    print(f"{s:.3f} {name} {lg[:14]}")
