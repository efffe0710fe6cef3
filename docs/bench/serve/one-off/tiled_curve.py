"""Where llama.cpp's tiled K-quant matmul starts to pay on this CPU: steps of s sequences (a cache
each) x r rows, and 512 prompt tokens read in one chunk; median of ROUNDS rounds in one process.
Run alternately with GGML_CPU_TILED_MM=0 and unset (the kernel is taken from 8 rows when on)."""
import os, time, statistics, sys
from coinfer.models import load_model
model = load_model(sys.argv[2] if len(sys.argv) > 2 else "qwen2.5-coder-1.5b", n_ctx=8192, n_seq_max=10, kv_unified=False)
text = open(os.path.join(os.path.dirname(__file__), "../../../../src/coinfer/chat/local.py")).read()
ctx = model.tokenize(text)[:1100]
seqs = []
for i in range(8):
    s = model.new_sequence(); model.extend_many_greedy([(s, ctx[:300 + 10 * i])]); seqs.append(s)
def step(n, r):
    items = [(seqs[i], ctx[50:50 + r]) for i in range(n)]
    before = [len(s.tokens) for s in seqs]
    model.extend_many_choices(items)
    for s, b in zip(seqs, before): model.truncate(s, b)
def prefill():
    s = model.new_sequence(); model.extend_many_greedy([(s, ctx[:512])]); model.release(s)
shapes = [(4, 1), (6, 1), (7, 1), (8, 1), (4, 2), (6, 2), (8, 2), (4, 4), (6, 4), (8, 3), (8, 4), (8, 6), (8, 8), (1, 8), (1, 16), (1, 32)]
cases = {f"{n}x{r}": (lambda n=n, r=r: step(n, r)) for n, r in shapes}
cases["read 512"] = prefill
res = {k: [] for k in cases}
for rnd in range(int(sys.argv[1])):
    for k, f in cases.items():
        t0 = time.perf_counter(); f(); res[k].append(time.perf_counter() - t0)
print(f"GGML_CPU_TILED_MM={os.environ.get('GGML_CPU_TILED_MM', '(unset)')}", " ".join(f"{k}:{statistics.median(v)*1000:.0f}" for k, v in res.items()), flush=True)
