import time, sys
from coinfer.models import load_model
from coinfer.models.llamacpp import LlamaCppModel
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.bench.workloads import build_suite
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=10, kv_unified=False)
suite = build_suite(per_category=6)
reqs = [ChatRequest(messages=p["messages"], max_tokens=64, temperature=0.0) for p in suite[:16]]
orig = LlamaCppModel._equal_groups
chat = LocalChat(model, max_concurrent=8, keep=2)
for cfg in sys.argv[1].split(","):
    LlamaCppModel._equal_groups = orig if cfg == "groups" else (lambda self, rows: [list(range(len(rows)))])
    t0 = time.perf_counter(); outs = chat.chat_batch(reqs); wall = time.perf_counter() - t0
    toks = sum(o.usage.completion_tokens for o in outs)
    print(f"{cfg}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s)", flush=True)
