import json, sys
import numpy as np
from coinfer.models import load_model
from coinfer.bench.broad_suite import broad_suite, split_suite
split, pid, pos = sys.argv[1], sys.argv[2], int(sys.argv[3])
items = {it["id"]: it for it in split_suite(broad_suite(8), split)}
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp")
plain = json.load(open(f"/tmp/exp/plain_{split}.json"))[pid]["plain"]
p = t.chat_prompt(items[pid]["messages"])
s = t.new_sequence(); t.extend(s, p, last_only=True)
rows = t.extend(s, plain[:pos])
r = rows[-1]; top = np.argsort(r)[-3:][::-1]
print("plain token at", pos, plain[pos], "top3", [(int(i), round(float(r[i]), 3)) for i in top])
