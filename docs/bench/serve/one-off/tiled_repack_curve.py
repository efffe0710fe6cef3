import sys, time, statistics
import llama_cpp
orig = llama_cpp.llama_model_default_params
flag = {"x": True}
def patched():
    p = orig(); p.use_extra_bufts = flag["x"]; return p
llama_cpp.llama_model_default_params = patched
from coinfer.models import load_model
models = {}
for name, x in (("repack", True), ("norepack", False)):
    flag["x"] = x
    models[name] = load_model(sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-1.5b", n_ctx=4096)
text = open("/work/main/src/coinfer/chat/local.py").read()
seqs = {}
for name, m in models.items():
    base = m.tokenize(text)[:300]
    s = m.new_sequence(); m.extend_many_greedy([(s, base)]); seqs[name] = (s, base)
NS = (1, 4, 8, 16, 64)
rows = {}
for rep in range(5):
    for n in NS:
        for name, m in (models.items() if rep % 2 == 0 else reversed(list(models.items()))):
            s, base = seqs[name]
            t0 = time.perf_counter(); m.extend_many_choices([(s, base[:n])]); dt = time.perf_counter() - t0
            m.truncate(s, 300)
            rows.setdefault((name, n), []).append(dt)
for name in models:
    print(name, " ".join(f"{n}:{statistics.median(rows[(name, n)])*1000:.0f}" for n in NS))
print("norepack/repack", " ".join(f"{n}:{statistics.median(rows[('norepack', n)])/statistics.median(rows[('repack', n)]):.3f}" for n in NS))
