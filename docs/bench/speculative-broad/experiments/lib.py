"""Time 1-token and 17-token decodes with whichever libllama LLAMA_CPP_LIB_PATH selects."""
import os, time, sys
from coinfer.models import load_model
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp", n_ctx=4096)
s = t.new_sequence(); t.extend(s, list(range(1000, 1400)), last_only=True)
L = len(s.tokens)
res = {1: [], 17: []}
for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 5):
    t0 = time.perf_counter()
    for i in range(20):
        t.extend_greedy(s, [1500 + i])
    res[1].append((time.perf_counter() - t0) / 20)
    t.truncate(s, L)
    for _ in range(3):
        t0 = time.perf_counter(); t.extend_greedy(s, list(range(2000, 2017))); res[17].append(time.perf_counter() - t0)
        t.truncate(s, L)
print(os.environ.get("LLAMA_CPP_LIB_PATH", "wheel"), {k: round(1000 * min(v), 1) for k, v in res.items()},
      {k: round(1000 * sorted(v)[len(v)//2], 1) for k, v in res.items()})
