import sys, time
from coinfer.models import load_model
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.bench.workloads import build_suite
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=10, kv_unified=False)
suite = build_suite(per_category=6)[:16]
reqs = [ChatRequest(messages=p["messages"], max_tokens=128, temperature=0.0) for p in suite]
width = int(sys.argv[2]) if len(sys.argv) > 2 else 8
for cfg in sys.argv[1].split(","):
    chat = LocalChat(model, max_concurrent=width, keep=2)
    if "spec" in cfg:
        chat.speculator = BatchSpeculator.over(NgramDrafter(), target_costs(model, Learned()), batch_floor=0.0)
    if "nosplit" in cfg:
        chat.split_judge.choose = lambda *a, **k: False
    chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
    t0 = time.perf_counter(); outs = chat.chat_batch(reqs); wall = time.perf_counter() - t0
    toks = sum(o.usage.completion_tokens for o in outs)
    print(f"{cfg}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s) pairs {chat.split_judge.pairs()}", flush=True)
    chat.close()
