import json, sys, functools
sys.path.insert(0, "/tmp/exp")
import sim
import coinfer.decoding.draft_length as dl
from coinfer.decoding import NgramDrafter
from coinfer.decoding.draft_length import AdaptiveDraftLength, DraftSizer
def shaped(knee, power):
    def prior(match, position, miss=1.0):
        L = max(1, match + position - 1)
        return max(0.0, 1.0 - miss / (L * (1 + (L / knee) ** power)))
    return prior
dl.copy_prior = shaped(*json.loads(sys.argv[3])) if len(sys.argv) > 3 else dl.copy_prior
data = json.load(open(f"/tmp/exp/plain_{sys.argv[1]}.json"))
v = data[sys.argv[2]]
prompt, plain = v["prompt"], v["plain"]
d = NgramDrafter(**(json.loads(sys.argv[4]) if len(sys.argv) > 4 else {})); sizer = DraftSizer(AdaptiveDraftLength(costs={}))
context = list(prompt) + [plain[0]]; produced = 1
while produced < len(plain):
    sizer.learn(0, context)
    k = max(0, min(sizer.next_k(), len(plain) - produced - 1))
    prop = d.propose(context, k); dd = sizer.cut(0, len(context), prop)
    n = 0
    while n < len(dd.tokens) and dd.tokens[n] == plain[produced + n]: n += 1
    # how far the untrimmed proposal would have held
    m = 0
    while m < len(prop.tokens) and produced + m < len(plain) and prop.tokens[m] == plain[produced + m]: m += 1
    if prop.tokens: print(produced, prop.bucket, "prop", len(prop.tokens), "would hold", m, "verify", len(dd.tokens), "kept", n)
    new = plain[produced:produced + n + 1]
    t = sim.cost(len(dd.tokens) + 1) / 1000
    sizer.observe(drafted=len(dd.tokens), draft_s=0.00002 * len(prop.tokens), verify_s=t, proposed=len(prop.tokens))
    context += new; produced += len(new)
