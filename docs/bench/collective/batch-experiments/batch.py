"""Plain decode throughput: B sequences stepping one token each per forward, batch 1 vs 4."""
import time, sys
from coinfer.models import load_model
kw = eval(sys.argv[1]) if len(sys.argv) > 1 else {}
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp", **kw)
def run(B, steps=24, ctx=300):
    seqs = [t.new_sequence() for _ in range(B)]
    for i, s in enumerate(seqs):
        t.extend(s, list(range(1000 + i, 1000 + i + ctx)), last_only=True)
    c0 = t.clock.compute_s; t0 = time.perf_counter()
    for j in range(steps):
        t.extend_many([(s, [2000 + j]) for s in seqs], last_only=True)
    w = time.perf_counter() - t0; c = t.clock.compute_s - c0
    for s in seqs: t.release(s)
    return B * steps / w, 1000 * w / steps, 1000 * c / steps
for rep in range(2):
    for B in (1, 2, 4):
        tps, ms, cms = run(B)
        print(kw, f"B={B} {tps:.1f} tok/s  {ms:.1f} ms/step (llama_decode {cms:.1f})", flush=True)
