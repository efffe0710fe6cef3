import sys, numpy as np
from coinfer.models import load_model
from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.decoding import SpecConfig, generate
items = {i["id"]: i for i in split_suite(broad_suite(8), "held-out")}
import os, json
t = load_model("qwen2.5-coder-1.5b", backend="llama.cpp", **json.loads(os.environ.get("KW","{}")))
item = items[sys.argv[1] if len(sys.argv) > 1 else "prose/for"]
p = t.chat_prompt(item["messages"])
plain = generate(t, p, draft=None, config=SpecConfig(max_tokens=192)).tokens
stream_ = p + plain
ks = [1, 3, 8]
stats = {k: [0.0, 0, 0] for k in ks}
seq = t.new_sequence()
t.extend(seq, p[:-1])
for at in range(0, len(plain) - 33):
    base = len(p) - 1 + at  # seq holds stream_[:base]
    if at % 6 == 0:
        ref = None
        for k in ks:
            rows = t.extend(seq, stream_[base:base + k + 1])
            t.truncate(seq, base)
            if ref is None:
                ref = t.extend(seq, stream_[base:base + 1])[0].copy(); t.truncate(seq, base)
            d = float(np.abs(rows[0] - ref).max())
            st = stats[k]; st[0] = max(st[0], d); st[1] += int(rows[0].argmax() != ref.argmax()); st[2] += 1
    t.extend(seq, stream_[base:base + 1])
for k in ks:
    print(k, "row0 maxdiff %.4f flips %d/%d" % tuple(stats[k]), flush=True)
