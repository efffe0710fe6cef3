"""What one verification step costs by its shape: 8 sequences of a cache each (streams 0-7,
300-370 tokens of context), each bringing the rows given (0: not in the step), timed as
extend_many_choices, median of 5 rounds. Usage: batch_shapes.py ROUNDS"""
import time, statistics, sys
from coinfer.models import load_model
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=10, kv_unified=False)
text = open("src/coinfer/chat/local.py").read()
ctx = model.tokenize(text)[:400]
seqs = []
for i in range(8):
    s = model.new_sequence(); model.extend_many_greedy([(s, ctx[:300 + 10 * i])]); seqs.append(s)
print("ids", [s.llama_id for s in seqs], flush=True)
def case(lens):
    return [(seqs[i], ctx[50:50 + n]) for i, n in enumerate(lens) if n]
cases = {
 "8x1": [1]*8,
 "4x4 on 0,2,4,6": [4,0,4,0,4,0,4,0],
 "4x4 on 0-3": [4,4,4,4,0,0,0,0],
 "1,4,1,4,1,4,1,4": [1,4,1,4,1,4,1,4],
 "1,1,1,1,4,4,4,4": [1,1,1,1,4,4,4,4],
 "4 on all 8": [4]*8,
 "1,2,3,4,1,2,3,4": [1,2,3,4,1,2,3,4],
 "1,3,1,3,1,3,1,3": [1,3,1,3,1,3,1,3],
 "3 on all 8": [3]*8,
 "2 on all 8": [2]*8,
 "1,2,1,2,1,2,1,2": [1,2,1,2,1,2,1,2],
}
res = {k: [] for k in cases}
for r in range(int(sys.argv[1])):
    for k, lens in cases.items():
        items = case(lens)
        before = [len(s.tokens) for s in seqs]
        t0 = time.perf_counter(); model.extend_many_choices(items); res[k].append(time.perf_counter() - t0)
        for s, b in zip(seqs, before): model.truncate(s, b)
for k, v in res.items(): print(f"{k:20s} rows {sum(cases[k]):3d}: {statistics.median(v)*1000:7.1f} ms", flush=True)
