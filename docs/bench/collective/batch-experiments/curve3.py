import time, os, json
from coinfer.models import load_model
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp", **json.loads(os.environ.get("KW","{}")))
seq = t.new_sequence()
base = list(range(1000, 1400))
t.extend(seq, base, last_only=True)
L = len(base)
res = {}
sizes = [1,2,3,4,5,6,7,8,9,12,16,24,32]
for rep in range(3):
    for n in sizes:
        t0 = time.perf_counter()
        t.extend_greedy(seq, list(range(2000, 2000 + n)))
        res.setdefault(n, []).append(time.perf_counter() - t0)
        t.truncate(seq, L)
t1 = min(res[1])
print(os.environ.get("GGML_CPU_TILED_MM"), " ".join(f"{n}:{1000*min(v):.0f}({min(v)/t1:.1f})" for n, v in res.items()), flush=True)
