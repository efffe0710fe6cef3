"""The first 12 unseen prompts served by one `coinfer serve` (ENGINE: plain or
speculative), each alone, each alone again (its whole prompt now cached), then 4 at a
time: for each prompt, whether the later answers equal the first, else the character
where they depart. Run from the repo root: PYTHONPATH=src python same_request_twice.py plain"""
import asyncio, json, sys
from coinfer.bench.serve_load import clients_at_once
from coinfer.serve.process import ServerProcess
prompts = [json.loads(l)["messages"] for l in open("docs/bench/serve/prompts/unseen.jsonl")][:12]
engine = sys.argv[1]
flags = ["--engine", "plain"] if engine == "plain" else ["--engine", "speculative", "--draft", "auto"]
work = [(p, None) for p in prompts]
def first_diff(a, b):
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n if len(a) == len(b) else n)
with ServerProcess("qwen2.5-coder-1.5b", ctx=4096, max_batch=8, extra_args=flags) as s:
    runs = {}
    for label, clients in (("alone", 1), ("alone2", 1), ("four", 4)):
        streams, wall = asyncio.run(clients_at_once(s.url, "qwen2.5-coder-1.5b", work, list(range(12)), clients, max_tokens=128, deadline_s=1800))
        runs[label] = {x.prompt: x.text for x in streams}
        print(label, f"{sum(x.tokens for x in streams)/wall:.2f} tok/s", flush=True)
for i in range(12):
    a, b, c = runs["alone"][i], runs["alone2"][i], runs["four"][i]
    print(i, len(a), "alone2", "same" if a == b else first_diff(a, b), "four", "same" if a == c else first_diff(a, c), repr(a[max(0,first_diff(a,c)-30):first_diff(a,c)+20]) if a != c else "")
