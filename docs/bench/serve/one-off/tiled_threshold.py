"""The tiled K-quant matmul's row threshold, A/B in one process. Needs the llama-cpp-python wheel
built with tiled_env.patch (the threshold read from GGML_CPU_TILED_MIN_ROWS at each matmul;
llama.cpp's is 8). Steps of s sequences (a cache each) x r rows, and 512 prompt tokens in one
chunk, under each threshold in turn (the order rotated every round); median of ROUNDS rounds."""
import os, time, statistics, sys
from coinfer.models import load_model
model = load_model(sys.argv[2] if len(sys.argv) > 2 else "qwen2.5-coder-1.5b", n_ctx=8192, n_seq_max=10, kv_unified=False)
text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../src/coinfer/chat/local.py")).read()
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
shapes = [(4, 1), (8, 1), (4, 2), (6, 2), (8, 2), (4, 4), (8, 3), (8, 4), (8, 6), (8, 8), (1, 8), (1, 16), (1, 32)]
cases = {f"{n}x{r}": (lambda n=n, r=r: step(n, r)) for n, r in shapes}
cases["read 512"] = prefill
thresholds = ["8", "32", "100000"]
res = {(t, k): [] for t in thresholds for k in cases}
for rnd in range(int(sys.argv[1])):
    order = thresholds[rnd % 3:] + thresholds[:rnd % 3]
    for k, f in cases.items():
        for t in order:
            os.environ["GGML_CPU_TILED_MIN_ROWS"] = t
            t0 = time.perf_counter(); f(); res[(t, k)].append(time.perf_counter() - t0)
for t in thresholds:
    print(f"min rows {t:>6}:", " ".join(f"{k}:{statistics.median(res[(t, k)])*1000:.0f}" for k in cases), flush=True)
