import time, json, os
from coinfer.models import load_model
res = {}
models = {name: load_model("qwen2.5-coder-1.5b", backend="llama.cpp", **kw) for name, kw in
          (("ours", {}), ("server-like", {"n_seq_max": 1, "kv_unified": False}))}
seqs = {}
for name, t in models.items():
    s = t.new_sequence(); t.extend(s, list(range(1000, 1400)), last_only=True); seqs[name] = s
for rep in range(5):
    for name, t in models.items():
        s = seqs[name]; L = len(s.tokens)
        t0 = time.perf_counter()
        for i in range(20):
            t.extend_greedy(s, [1500 + i])
        res.setdefault((name, 1), []).append((time.perf_counter() - t0) / 20)
        t.truncate(s, L)
        t0 = time.perf_counter(); t.extend_greedy(s, list(range(2000, 2017))); res.setdefault((name, 17), []).append(time.perf_counter() - t0)
        t.truncate(s, L)
print({f"{k[0]} n={k[1]}": round(1000 * min(v), 1) for k, v in res.items()})
