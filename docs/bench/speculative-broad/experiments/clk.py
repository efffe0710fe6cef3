import os, time, sys
from coinfer.models import load_model
kw = {}
if len(sys.argv) > 1: kw = eval(sys.argv[1])
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp", n_ctx=4096, **kw)
s = t.new_sequence(); t.extend(s, list(range(1000, 1400)), last_only=True)
L = len(s.tokens)
best = None
for rep in range(5):
    c0, l0 = t.clock.compute_s, t.clock.logits_s
    t0 = time.perf_counter()
    for i in range(32):
        t.extend_greedy(s, [1500 + i])
    w = (time.perf_counter() - t0) / 32
    c = (t.clock.compute_s - c0) / 32; l = (t.clock.logits_s - l0) / 32
    t.truncate(s, L)
    if best is None or w < best[0]: best = (w, c, l)
print(kw, "wall %.1f compute %.1f logits %.2f ms" % tuple(1000 * x for x in best))
