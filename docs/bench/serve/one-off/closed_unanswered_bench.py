"""The 33 prompts of build_suite(11) streamed one after another to llama-server --spec-type ngram-mod (8 slots)
through the bench's own loop (clients_at_once, 1 client): errors and requests sent again (stream_chat)."""
import asyncio
from coinfer.bench.serve_concurrency import start_system, system_flags
from coinfer.bench.serve_load import clients_at_once
from coinfer.bench.workloads import build_suite
suite = build_suite(11)
kind, flags = system_flags("llama-server-ngram-mod", 0.0)
url, stop = start_system(kind, flags, model="qwen2.5-coder-1.5b", ctx=4096, slots=8)
try:
    work = [(p["messages"], None) for p in suite]
    streams, wall = asyncio.run(clients_at_once(url, "qwen2.5-coder-1.5b", work, list(range(len(work))), 1, max_tokens=128, deadline_s=900))
    print("errors", [s.error for s in streams if s.error], "resent", [(s.prompt, s.resent) for s in streams if s.resent], "tok/s", sum(s.tokens for s in streams) / wall)
finally:
    stop()
