import json, math, sys, collections
from coinfer.decoding import NgramDrafter
from coinfer.decoding.draft_length import AdaptiveDraftLength, DraftSizer
COST = {1:32,2:62,3:76,4:94,5:117,6:135,7:156,8:221,9:231,10:248,12:269,13:283,16:254,17:298,20:330,24:390,25:422,32:420,33:485,40:594,48:657,64:844}
def cost(n):
    if n in COST: return COST[n]
    ks = sorted(COST); lo = max(k for k in ks if k < n); hi = min(k for k in ks if k > n)
    w = (n - lo) / (hi - lo); return (1 - w) * COST[lo] + w * COST[hi]
def simulate(prompt, plain, make_policy, drafter_kw={}):
    d = NgramDrafter(**drafter_kw); sizer = DraftSizer(make_policy())
    context = list(prompt) + [plain[0]]; produced = 1; total = 0.0
    while produced < len(plain):
        sizer.learn(0, context)
        room = len(plain) - produced - 1
        k = max(0, min(sizer.next_k(), room))
        prop = d.propose(context, k)
        dd = sizer.cut(0, len(context), prop)
        n = 0
        while n < len(dd.tokens) and dd.tokens[n] == plain[produced + n]: n += 1
        new = plain[produced:produced + n + 1]
        d.feedback(0, context, new)
        t = cost(len(dd.tokens) + 1) / 1000
        sizer.observe(drafted=len(dd.tokens), draft_s=0.00002 * len(prop.tokens), verify_s=t, proposed=len(prop.tokens))
        total += t; context += new; produced += len(new)
    return (len(plain) - 1) * cost(1) / 1000 / total
def run(data, make_policy, label, **kw):
    by = collections.defaultdict(list)
    for v in data.values():
        by[v["category"]].append(simulate(v["prompt"], v["plain"], make_policy, **kw))
    g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
    allx = [x for xs in by.values() for x in xs]
    print(f"{label:28s} geo {g(allx):.3f} min {min(allx):.3f} " + " ".join(f"{c[:5]} {g(xs):.2f}/{min(xs):.2f}" for c, xs in by.items()), flush=True)
if __name__ == "__main__":
    data = json.load(open(sys.argv[1]))
    run(data, AdaptiveDraftLength, "current")

def simulate_simple(prompt, plain, n=12, m=48):
    """llama.cpp's ngram-simple: the last n tokens found earlier -> draft up to m that followed."""
    context = list(prompt) + [plain[0]]; produced = 1; total = 0.0
    while produced < len(plain):
        draft = []
        L = len(context)
        if L > n + m + 1:
            pat = context[L - n:]
            for j in range(L - n - 1, 0, -1):
                if context[j:j + n] == pat:
                    cm = min(m, L - (j + n))
                    if cm >= n:
                        draft = context[j + n:j + n + cm]
                    break
        room = len(plain) - produced - 1
        draft = draft[:max(0, room)]
        k = 0
        while k < len(draft) and draft[k] == plain[produced + k]: k += 1
        new = plain[produced:produced + k + 1]
        total += cost(len(draft) + 1) / 1000; context += new; produced += len(new)
    return (len(plain) - 1) * cost(1) / 1000 / total

def run_simple(data, label="ngram-simple", **kw):
    by = collections.defaultdict(list)
    for v in data.values():
        by[v["category"]].append(simulate_simple(v["prompt"], v["plain"], **kw))
    g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
    allx = [x for xs in by.values() for x in xs]
    print(f"{label:28s} geo {g(allx):.3f} min {min(allx):.3f} " + " ".join(f"{c[:5]} {g(xs):.2f}/{min(xs):.2f}" for c, xs in by.items()), flush=True)
