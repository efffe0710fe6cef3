import time, statistics, collections
from coinfer.models import load_model
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.bench.workloads import build_suite
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=10, kv_unified=False)
suite = build_suite(per_category=6)[:16]
reqs = [ChatRequest(messages=p["messages"], max_tokens=128, temperature=0.0) for p in suite]
chat = LocalChat(model, max_concurrent=8, keep=0)
steps = collections.defaultdict(list)
of = chat._forwards
log = []
def forwards(feed):
    parts = of(feed); log.append([len(p) for p in parts]); return parts
chat._forwards = forwards
om = chat._measured
def measured(rows, split, seconds):
    steps[(rows, split)].append(seconds); log[-1].append(round(seconds*1000)); om(rows, split, seconds)
chat._measured = measured
chat.chat_batch(reqs)
for k, v in sorted(steps.items()):
    print("step", k, len(v), f"{statistics.median(v)*1000:.1f} ms")
print(log)
print(chat.split_judge.pairs())
