"""Plain batched decoding through the collective engine (s = 0) at batch 1, 4 and 8, on the
broad suite's held-out prompts, as `coinfer bench collective` loads the target: aggregate
tok/s with prefill, decode tok/s without it, and the prefill seconds. Run it once with
GGML_CPU_TILED_MM=1 (llama.cpp's default) and once with 0 (no tiled K-quant matmuls)."""
import os
import sys

from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.bench.collective import _load, _measure, _row
from coinfer.engines.collective import CollectiveConfig

items = split_suite(broad_suite(8), sys.argv[1] if len(sys.argv) > 1 else "held-out")
messages = [p["messages"] for p in items]
categories = [p["category"] for p in items]
target = _load("qwen2.5-coder-1.5b", 2048 * 8)
for batch in (1, 4, 8):
    config = CollectiveConfig(max_tokens=128, draft_tokens=0, max_batch=batch)
    responses, wall = _measure(target, {}, messages, (), config)
    r = _row("plain", batch, responses, wall, None, categories)
    print(f"TILED_MM={os.environ.get('GGML_CPU_TILED_MM', '1')} batch {batch}: {r['tokens_per_s']} tok/s, "
          f"decode {r['decode_tokens_per_s']} tok/s, prefill {r['prefill_s']} s, wall {r['wall_s']} s", flush=True)
