import time, sys
from coinfer.models import load_model
ctx = int(sys.argv[1])
model = load_model("qwen2.5-coder-1.5b", n_ctx=ctx, n_seq_max=10, kv_unified=False, n_threads=2)
a = model.new_sequence(); model.extend_many_greedy([(a, list(range(1000, 1300)))])
for share in (8, 16, 32):
  for rep in range(3):
    t0 = time.perf_counter(); b = model.fork(a); model.truncate(b, share); model.extend_many_greedy([(b, [5])]); t1 = time.perf_counter()
    c = model.new_sequence(); model.extend_many_greedy([(c, list(range(1000, 1000 + share)) + [5])]); t2 = time.perf_counter()
    model.release(b); model.release(c)
    print(f"ctx {ctx} share {share}: fork+1 {1000*(t1-t0):.0f} ms, read {share}+1 {1000*(t2-t1):.0f} ms", flush=True)
