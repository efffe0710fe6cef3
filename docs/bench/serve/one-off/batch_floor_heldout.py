"""Sweep the speculative engine's batch floor at 16 clients on the TUNED prompts only
(every fourth prompt of the suite is held out and never sent here)."""
import asyncio, json, sys
from coinfer.bench.workloads import build_suite
from coinfer.bench.serve_load import clients_at_once
from coinfer.serve.process import ServerProcess

suite = build_suite(8)
tuned = [p for i, p in enumerate(suite) if i % 4 == 3]  # HELD OUT this time
work = [(list(p["messages"]), None) for p in tuned]
order = list(range(len(tuned)))
out = {}
for label in sys.argv[1:]:
    flags = ["--engine", "plain"] if label == "plain" else ["--engine", "speculative", "--draft", "auto", "--batch-floor", label]
    with ServerProcess("qwen2.5-coder-1.5b", ctx=4096, max_batch=8, extra_args=flags) as s:
        streams, wall = asyncio.run(clients_at_once(s.url, "qwen2.5-coder-1.5b", work, order, len(tuned), max_tokens=128, deadline_s=1800))
    tokens = sum(x.tokens for x in streams if x.error is None)
    out[label] = round(tokens / wall, 2)
    print(label, out[label], "tok/s", sum(x.error is not None for x in streams), "errors", flush=True)
print(json.dumps(out))
