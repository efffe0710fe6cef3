import json, sys, functools
sys.path.insert(0, "/tmp/exp")
import sim
from qpol import QPolicy, shaped
from coinfer.decoding import NgramDrafter
from coinfer.decoding.draft_length import DraftSizer
data = json.load(open(f"/tmp/exp/plain_{sys.argv[1]}.json"))
v = data[sys.argv[2]]; cfg = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
prompt, plain = v["prompt"], v["plain"]
pol = QPolicy(costs={1: 0.032, 2: 0.062, 4: 0.094, 8: 0.221, 17: 0.298, 33: 0.485, 49: 0.67}, **cfg)
d = NgramDrafter(); sizer = DraftSizer(pol)
context = list(prompt) + [plain[0]]; produced = 1
while produced < len(plain):
    sizer.learn(0, context)
    k = max(0, min(sizer.next_k(), len(plain) - produced - 1))
    prop = d.propose(context, k); dd = sizer.cut(0, len(context), prop)
    n = 0
    while n < len(dd.tokens) and dd.tokens[n] == plain[produced + n]: n += 1
    m = 0
    while m < len(prop.tokens) and produced + m < len(plain) and prop.tokens[m] == plain[produced + m]: m += 1
    if prop.tokens and (dd.tokens or m > 3): print(produced, prop.bucket, "prop", len(prop.tokens), "hold", m, "verify", len(dd.tokens), "kept", n, "q %.2f" % pol.ratio())
    new = plain[produced:produced + n + 1]
    t = sim.cost(len(dd.tokens) + 1) / 1000
    sizer.observe(drafted=len(dd.tokens), draft_s=0.00002 * len(prop.tokens), verify_s=t, proposed=len(prop.tokens))
    context += new; produced += len(new)
