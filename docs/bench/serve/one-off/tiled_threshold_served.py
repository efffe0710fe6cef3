"""Plain and speculative (n-gram) decoding as `coinfer serve` batches them, in process, under the
tiled matmul's row threshold of llama.cpp (8) and a higher one, alternated run by run in one process
(the wheel built with tiled_env.patch). The first N tune prompts of build_suite(6), TOKENS each,
through one LocalChat per width, loaded as the server loads its target."""
import sys, time, os
from coinfer.models import load_model
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.bench.workloads import build_suite
n, tokens, high = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
widths = [int(w) for w in sys.argv[4].split(",")] if len(sys.argv) > 4 else [4, 8]
model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=8 + 2, kv_unified=False)
suite = build_suite(per_category=6)
tune = [p for i, p in enumerate(suite) if i % 4 != 3]
reqs = [ChatRequest(messages=p["messages"], max_tokens=tokens, temperature=0.0) for p in tune[:n]]
for width in widths:
    chat = LocalChat(model, max_concurrent=width, keep=0)
    chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
    learned = Learned()
    for cfg in ("plain", "speculative"):
        for i, rows in enumerate(("8", high, high, "8")):
            os.environ["GGML_CPU_TILED_MIN_ROWS"] = rows
            chat.speculator = None if cfg == "plain" else BatchSpeculator.over(NgramDrafter(), target_costs(model, learned), batch_floor=0.0)
            t0 = time.perf_counter(); outs = chat.chat_batch(reqs); wall = time.perf_counter() - t0
            toks = sum(o.usage.completion_tokens for o in outs)
            print(f"min rows {rows:>3} width {width} {cfg}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f} s)", flush=True)
