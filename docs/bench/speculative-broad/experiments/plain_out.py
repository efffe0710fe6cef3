import json, sys
from coinfer.models import load_model
from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.bench.workloads import build_suite
from coinfer.decoding import SpecConfig, generate
split = sys.argv[1]
items = build_suite(8) if split == "committed" else split_suite(broad_suite(8), split)
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp")
out = {}
for it in items:
    p = t.chat_prompt(it["messages"])
    out[it["id"]] = {"category": it["category"], "prompt": p, "plain": generate(t, p, draft=None, config=SpecConfig(max_tokens=int(sys.argv[2]))).tokens}
json.dump(out, open(f"/tmp/exp/plain_{split}.json", "w"))
print("done")
