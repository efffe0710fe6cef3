import time, statistics
from coinfer.models import load_model
m = load_model("qwen2.5-coder-1.5b", n_ctx=4096)
base = m.tokenize(open("src/coinfer/chat/local.py").read())[:300]
s = m.new_sequence(); m.extend_many_greedy([(s, base)])
rows = {}
for rep in range(3):
    for n in (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96):
        toks = base[:n] if n <= 300 else base
        t0 = time.perf_counter(); m.extend_many_choices([(s, toks)]); dt = time.perf_counter() - t0
        m.truncate(s, 300)
        rows.setdefault(n, []).append(dt)
for n, v in rows.items():
    med = statistics.median(v); print(f"n={n:3d} {med*1000:7.1f} ms  {med*1000/n:6.1f} ms/row  x{med/statistics.median(rows[1]):.2f}")
# prefill speed
for chunk in (128, 512):
    t = []
    for rep in range(2):
        s2 = m.new_sequence(); toks = m.tokenize(open("src/coinfer/chat/local.py").read())[:1024]
        t0 = time.perf_counter()
        for lo in range(0, 1024, chunk): m.extend_many_greedy([(s2, toks[lo:lo+chunk])])
        t.append(time.perf_counter() - t0); m.release(s2)
    print(f"prefill chunk {chunk}: {1024/min(t):.1f} tok/s")
