import sys, numpy as np
from coinfer.models import load_model
from coinfer.bench.serve_load import load_prompts
name = sys.argv[1]
model = load_model(name, n_ctx=1024, n_seq_max=4, kv_unified=False)
bad = {}
for k in range(3):
    p = model.chat_prompt([{"role": "user", "content": load_prompts(20)[k * 5]}])
    s = model.new_sequence(); full = model.extend(s, p, last_only=True)[-1]
    for t in range(1, 41):
        f = model.fork(s); model.truncate(f, len(p) - t); l = model.extend(f, p[-t:], last_only=True)[-1]; model.release(f)
        if not np.array_equal(l, full): bad.setdefault(k, []).append(t)
    model.release(s)
print(name, "tails that differ from the whole read:", bad)
