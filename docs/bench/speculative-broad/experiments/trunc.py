import time
from coinfer.models import load_model
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp")
seq = t.new_sequence()
t.extend(seq, list(range(1000, 1300)), last_only=True)
tok = 1500
res = {"plain": [], "truncate": []}
for rep in range(6):
    for mode in ("plain", "truncate"):
        t0 = time.perf_counter()
        for i in range(30):
            t.extend_greedy(seq, [tok + i])
            if mode == "truncate":
                t.truncate(seq, len(seq.tokens))
        res[mode].append((time.perf_counter() - t0) / 30)
print({k: round(1000 * min(v), 2) for k, v in res.items()}, {k: round(1000 * sorted(v)[len(v)//2], 2) for k, v in res.items()})
