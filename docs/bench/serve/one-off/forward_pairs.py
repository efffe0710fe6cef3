import time, statistics
from coinfer.models import load_model
from coinfer.bench.workloads import build_suite
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=10, kv_unified=False)
suite = build_suite(per_category=6)[:16]
seqs = []
for p in suite[4:12]:
    ids = model.chat_prompt(p["messages"]); s = model.new_sequence(); model.extend_many_greedy([(s, ids)]); seqs.append(s)
res = {"8": [], "4+4": [], "7+1": [], "6+2": [], "7": [], "1": [], "4": []}
for r in range(12):
    for k in res:
        parts = [int(x) for x in k.split("+")]
        t0 = time.perf_counter(); start = 0
        for n in parts:
            model.extend_many_greedy([(s, [100 + r]) for s in seqs[start:start + n]]); start += n
        res[k].append(time.perf_counter() - t0)
        for s in seqs: 
            if len(s.tokens) > 0: pass
for k, v in res.items(): print(k, f"{statistics.median(v)*1000:.1f} ms")
