import time
from coinfer.models import load_model
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp")
seq = t.new_sequence()
base = list(range(1000, 1400)); t.extend(seq, base, last_only=True); L = len(base)
res = {}
for rep in range(3):
    for n in [1, 4, 8, 16, 17]:
        for mode in ("all", "last"):
            t0 = time.perf_counter()
            if mode == "all": t.extend_greedy(seq, list(range(2000, 2000 + n)))
            else: t.extend(seq, list(range(2000, 2000 + n)), last_only=True)
            res.setdefault((n, mode), []).append(time.perf_counter() - t0); t.truncate(seq, L)
print(" ".join(f"{n}/{m}:{1000*min(v):.0f}" for (n, m), v in res.items()))
