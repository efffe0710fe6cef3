import time, statistics, sys
from coinfer.models import load_model
model = load_model("qwen2.5-coder-1.5b", n_ctx=512, n_seq_max=33, kv_unified=False)
ctx = model.tokenize("def f(x):\n    return x * 2\n" * 30)[:200]
seqs = []
for i in range(32):
    s = model.new_sequence(); model.extend_many_greedy([(s, ctx)]); seqs.append(s)
one = model.new_sequence(); model.extend_many_greedy([(one, ctx)])
for w in [int(x) for x in sys.argv[1].split(",")]:
    ts, ts1 = [], []
    for r in range(5):
        items = [(s, [ctx[r]]) for s in seqs[:w]]
        t0 = time.perf_counter(); model.extend_many_greedy(items); ts.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); model.extend_many_choices([(one, ctx[:w])]); ts1.append(time.perf_counter() - t0)
        model.truncate(one, 200)
    m, m1 = statistics.median(ts), statistics.median(ts1)
    print(f"n {w:2d}: {w} seqs x1 {m*1000:7.1f} ms ({m*1000/w:5.1f}/row) | 1 seq x{w} {m1*1000:7.1f} ms", flush=True)
