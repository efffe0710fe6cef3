import json, sys
from coinfer.models import load_model
model = load_model("qwen2.5-coder-1.5b", n_ctx=256, n_seq_max=1)
data = json.load(open("greedy_texts.json"))
reqs = []
for d in data:
    out = model.tokenize(d["text"], add_bos=False) if "add_bos" in model.tokenize.__code__.co_varnames else model.tokenize(d["text"])
    reqs.append((d["prompt"], out))
def run(N, nmin, nmax, pool_mode):
    pool = {}
    tot_out = tot_acc = events = 0
    for i, (prompt, out) in enumerate(reqs):
        own = {}
        ctx = list(prompt)
        for j in range(len(ctx) - N):
            own[tuple(ctx[j:j+N])] = ctx[j+N]
        t = 0
        while t < len(out):
            ctx_now = prompt + out[:t]
            # draft chain
            draft = []
            window = list(ctx_now[-N:])
            for _ in range(nmax):
                key = tuple(window[-N:])
                nxt = own.get(key)
                if nxt is None and pool_mode: nxt = pool.get(key)
                if nxt is None: break
                draft.append(nxt); window.append(nxt)
            acc = 0
            if len(draft) >= nmin:
                events += 1
                while acc < len(draft) and t + acc < len(out) and draft[acc] == out[t + acc]:
                    acc += 1
            tot_acc += acc
            step = acc + 1
            for s in range(step):
                if t + s < len(out):
                    c = prompt + out[:t + s + 1]
                    if len(c) > N: own[tuple(c[-N-1:-1])] = c[-1]
            t += step
        tot_out += len(out)
        full = prompt + out
        for j in range(len(full) - N):
            pool[tuple(full[j:j+N])] = full[j+N]
    return tot_out, tot_acc, events
for N, nmin, nmax in [(24, 48, 64), (8, 1, 16), (4, 1, 16), (12, 8, 32)]:
    for pm in (False, True):
        o, a, e = run(N, nmin, nmax, pm)
        print(f"N={N} nmin={nmin} nmax={nmax} pool={pm}: out {o} accepted {a} ({a/o:.1%}) drafting steps {e}")
