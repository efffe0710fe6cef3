"""Prompt reading rate of qwen2.5-coder-1.5b alone, one sequence, by chunk size (median of 3). What it printed: reading_share.txt."""
import time, statistics
from coinfer.models import load_model
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=8, kv_unified=False)
text = model.tokenize(open("src/coinfer/chat/local.py").read())[:2048]
for n in [64, 128, 256, 384, 512, 1024]:
    ts = []
    for r in range(3):
        s = model.new_sequence()
        t0 = time.perf_counter(); model.extend_many_greedy([(s, text[:n])]); ts.append(time.perf_counter() - t0)
        model.release(s)
    m = statistics.median(ts)
    print(f"prefill {n:5d}: {m*1000:7.0f} ms  {n/m:6.1f} tok/s", flush=True)
# two prompts of 256 in one step (two sequences)
ts=[]
for r in range(3):
    a, b = model.new_sequence(), model.new_sequence()
    t0 = time.perf_counter(); model.extend_many_greedy([(a, text[:256]), (b, text[256:512])]); ts.append(time.perf_counter() - t0)
    for s in (a, b): model.release(s)
m = statistics.median(ts); print(f"2 x 256 in one call: {m*1000:.0f} ms {512/m:.1f} tok/s")
