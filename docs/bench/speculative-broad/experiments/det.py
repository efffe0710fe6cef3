"""In one process, per held-out prompt: plain, coinfer, plain, coinfer; identity of each to the first plain."""
import sys, time
from coinfer.models import load_model
from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.decoding import SpecConfig, generate, NgramDrafter
split = sys.argv[1]
items = split_suite(broad_suite(8), split)
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp")
def first_diff(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))
for it in items:
    p = t.chat_prompt(it["messages"])
    runs = []
    for kind in ("plain", "spec", "plain", "spec"):
        d = None if kind == "plain" else NgramDrafter()
        cfg = SpecConfig(max_tokens=192) if kind == "plain" else SpecConfig(max_tokens=192, draft_tokens="auto")
        r = generate(t, p, draft=d, config=cfg)
        runs.append((kind, r.tokens, r.stats.drafted))
    base = runs[0][1]
    print(it["id"][:30].ljust(30), " ".join(f"{k}:{first_diff(tok, base)}/d{dr}" for k, tok, dr in runs[1:]), flush=True)
