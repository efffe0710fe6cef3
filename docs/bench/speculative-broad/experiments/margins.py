"""Margins (top-1 minus top-2 logit) of the batch rows whose argmax coinfer emits, per prompt,
and whether its greedy text equals plain decoding's."""
import json, sys, collections
import numpy as np
from coinfer.models import load_model
from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.decoding import SpecConfig, generate, NgramDrafter
split = sys.argv[1]
items = split_suite(broad_suite(8), split)
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp")
plain = json.load(open(f"/tmp/exp/plain_{split}.json"))
orig = t.extend_greedy
rec = []
def wrapped(seq, chain):
    if len(chain) == 1:
        return orig(seq, chain)
    logits = t.extend(seq, chain)
    choices = np.argmax(logits, axis=-1)
    top2 = np.partition(logits, -2, axis=-1)[:, -2:]
    margin = np.abs(top2[:, 1] - top2[:, 0])
    n = 0
    while n < len(chain) - 1 and chain[n + 1] == choices[n]: n += 1
    rec.extend(float(m) for m in margin[: n + 1])
    return choices
t.extend_greedy = wrapped
for it in items:
    rec.clear()
    p = t.chat_prompt(it["messages"])
    out = generate(t, p, draft=NgramDrafter(), config=SpecConfig(max_tokens=192)).tokens
    same = out == plain[it["id"]]["plain"]
    first = next((i for i, (a, b) in enumerate(zip(out, plain[it["id"]]["plain"])) if a != b), None)
    r = np.array(rec) if rec else np.array([9.9])
    print(it["id"][:30].ljust(30), "same" if same else f"DIFF@{first}", "batch rows", len(rec), "min %.2f" % r.min(), "<0.5: %d <1: %d" % ((r < 0.5).sum(), (r < 1).sum()), flush=True)
