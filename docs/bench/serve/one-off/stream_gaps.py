"""What a plain decoding step of 8 requests (one row each) costs by where their streams lie:
10 sequences of a cache each (as open_local_chat loads a served model: 8 slots + 2 kept),
300-390 tokens of context each; a step over 8 of them, timed as extend_many_choices, median of
ROUNDS rounds, the layouts alternated within each round. Usage: stream_gaps.py ROUNDS"""
import time, statistics, sys
from coinfer.models import load_model
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=10, kv_unified=False)
text = open("/work/main/src/coinfer/chat/local.py").read()
ctx = model.tokenize(text)[:500]
seqs = []
for i in range(10):
    s = model.new_sequence(); model.extend_many_greedy([(s, ctx[:300 + 10 * i])]); seqs.append(s)
print("ids", [s.llama_id for s in seqs], flush=True)
layouts = {
    "0-7 (one pass)": [0, 1, 2, 3, 4, 5, 6, 7],
    "0-2,4-8 (3+5)": [0, 1, 2, 4, 5, 6, 7, 8],
    "1,2,4-8,9 (2+6)": [1, 2, 4, 5, 6, 7, 8, 9],
    "0,2,4,5,6,7,8,9 (1+1+6)": [0, 2, 4, 5, 6, 7, 8, 9],
    "0-3 (one pass of 4)": [0, 1, 2, 3],
    "0,1,3,4 (2+2)": [0, 1, 3, 4],
}
res = {k: [] for k in layouts}
for r in range(int(sys.argv[1])):
    for k, ids in (layouts.items() if r % 2 == 0 else reversed(list(layouts.items()))):
        items = [(seqs[i], ctx[400:401]) for i in ids]
        before = [len(seqs[i].tokens) for i in ids]
        t0 = time.perf_counter(); model.extend_many_choices(items); res[k].append(time.perf_counter() - t0)
        for i, b in zip(ids, before): model.truncate(seqs[i], b)
for k, v in res.items():
    print(f"{k:26s} passes {model.pass_rows([(seqs[i], 1) for i in layouts[k]])}: {statistics.median(v)*1000:7.1f} ms", flush=True)
