"""llama.cpp's tiled K-quant matmul (on from 8 rows; GGML_CPU_TILED_MM=0 turns it off) against
the stock path: steps of 8 sequences (a cache each) by shape, and prompt reading in 512-token
chunks; median of ROUNDS rounds in one process. Run alternately with the variable set and not."""
import os, time, statistics, sys
from coinfer.models import load_model
model = load_model(sys.argv[2] if len(sys.argv) > 2 else "qwen2.5-coder-1.5b", n_ctx=8192, n_seq_max=10, kv_unified=False)
text = open("/work/main/src/coinfer/chat/local.py").read()
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
    s = model.new_sequence()
    for lo in range(0, 1024, 512): model.extend_many_greedy([(s, ctx[lo:lo + 512])])
    model.release(s)
cases = {"1x1": lambda: step(1, 1), "4x1": lambda: step(4, 1), "7x1": lambda: step(7, 1), "8x1": lambda: step(8, 1),
         "4x2": lambda: step(4, 2), "8x2": lambda: step(8, 2), "8x4": lambda: step(8, 4), "1x8": lambda: step(1, 8),
         "read 1024": prefill}
res = {k: [] for k in cases}
for rnd in range(int(sys.argv[1])):
    for k, f in cases.items():
        t0 = time.perf_counter(); f(); res[k].append(time.perf_counter() - t0)
print(f"GGML_CPU_TILED_MM={os.environ.get('GGML_CPU_TILED_MM', '(unset)')}", " ".join(f"{k}:{statistics.median(v)*1000:.0f}" for k, v in res.items()), flush=True)
