"""A prefix copy from an N-token source: its cost, the next forward's, and reading 41 tokens."""

import sys
import time

from coinfer import catalog
from coinfer.models.llamacpp import LlamaCppModel
m = LlamaCppModel(catalog.prepare("qwen2.5-coder-1.5b"), n_ctx=8192, n_seq_max=10, kv_unified=False)
a = m.new_sequence()
m.extend(a, list(range(1000, 1000 + int(sys.argv[1]))))
for rep in range(3):
    t0 = time.perf_counter(); c = m.fork(a); m.truncate(c, 40); t1 = time.perf_counter()
    m.extend(c, [77]); t2 = time.perf_counter()
    b = m.new_sequence(); m.extend(b, list(range(2000, 2041))); t3 = time.perf_counter()
    print(f"fork {1e3*(t1-t0):.1f} ms, next 1-token forward {1e3*(t2-t1):.1f} ms; reading 41 tokens {1e3*(t3-t2):.1f} ms")
    m.release(c); m.release(b)
