import json
import os
import time

from coinfer.models import load_model

# KW: model keyword arguments as JSON; SIZES: the row counts to time (comma-separated)
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp", **json.loads(os.environ.get("KW", "{}")))
seq = t.new_sequence()
base = list(range(1000, 1400))
t.extend(seq, base, last_only=True)
L = len(base)
res = {}
sizes = [int(n) for n in os.environ.get("SIZES", "1,2,4,8,16,32").split(",")]
for _rep in range(3):
    for n in sizes:
        t0 = time.perf_counter()
        t.extend_greedy(seq, list(range(2000, 2000 + n)))
        dt = time.perf_counter() - t0
        t.truncate(seq, L)
        res.setdefault(n, []).append(dt)
t1 = min(res[1])
label = os.environ.get("GGML_CPU_TILED_MM")
print(
    *([f"TILED_MM={label}"] if label else []),
    " ".join(f"{n}:{1000 * min(v):.0f}ms({min(v) / t1:.1f})" for n, v in res.items()),
)
