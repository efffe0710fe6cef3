import time, statistics, random
from coinfer.models import load_model
model = load_model("qwen2.5-coder-1.5b", n_ctx=1024, n_seq_max=12, kv_unified=False)
ctx = model.tokenize("def f(x):\n    return x * 2\n" * 30)[:200]
seqs = []
for i in range(12):
    s = model.new_sequence(); model.extend_many_greedy([(s, ctx)]); seqs.append(s)
print("ids", [s.llama_id for s in seqs])
by = {s.llama_id: s for s in seqs}
cases = {
 "0..7 in order": [by[i] for i in range(8)],
 "0..7 reversed": [by[i] for i in reversed(range(8))],
 "0..7 shuffled": [by[i] for i in [3,0,6,1,7,2,5,4]],
 "gaps 0,1,2,4,6,7,8,9 in order": [by[i] for i in [0,1,2,4,6,7,8,9]],
}
res = {k: [] for k in cases}
for r in range(6):
    for k, ss in cases.items():
        t0 = time.perf_counter(); model.extend_many_greedy([(s, [ctx[r]]) for s in ss]); res[k].append(time.perf_counter() - t0)
for k, v in res.items(): print(f"{k}: {statistics.median(v)*1000:.1f} ms")
