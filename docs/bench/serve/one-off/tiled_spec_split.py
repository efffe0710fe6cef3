"""A step of 8 sequences (a cache each) bringing r rows each: one forward, or two of 4
sequences each; median of ROUNDS rounds, interleaved."""
import time, statistics, sys
from coinfer.models import load_model
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=10, kv_unified=False)
text = open("/work/main/src/coinfer/chat/local.py").read()
ctx = model.tokenize(text)[:400]
seqs = []
for i in range(8):
    s = model.new_sequence(); model.extend_many_greedy([(s, ctx[:300 + 10 * i])]); seqs.append(s)
def step(idx, r):
    items = [(seqs[i], ctx[50:50 + r]) for i in idx]
    before = [len(s.tokens) for s in seqs]
    model.extend_many_choices(items)
    for s, b in zip(seqs, before): model.truncate(s, b)
cases = {}
for r in (1, 2, 3, 4):
    cases[f"8x{r} whole"] = (r, [list(range(8))])
    cases[f"8x{r} 4+4"] = (r, [[0, 1, 2, 3], [4, 5, 6, 7]])
    cases[f"4x{r} whole"] = (r, [[0, 1, 2, 3]])
    cases[f"4x{r} 2+2"] = (r, [[0, 1], [2, 3]])
res = {k: [] for k in cases}
for rnd in range(int(sys.argv[1])):
    for k, (r, parts) in cases.items():
        t0 = time.perf_counter()
        for p in parts: step(p, r)
        res[k].append(time.perf_counter() - t0)
for k, v in res.items(): print(f"{k:12s}: {statistics.median(v)*1000:7.1f} ms  ({', '.join(f'{x*1000:.0f}' for x in v)})", flush=True)
