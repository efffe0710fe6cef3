import sys, time
from coinfer.models import load_model
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs, stream, SpecConfig
from coinfer.bench.workloads import build_suite

model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=10, kv_unified=False)
suite = build_suite(per_category=6)
which = sys.argv[1] if len(sys.argv) > 1 else "all"
sel = [p for i, p in enumerate(suite) if which == "all" or (i % 4 == 3) == (which == "held")]
configs = sys.argv[2].split(",")
learned = Learned()
chat = LocalChat(model, max_concurrent=1, keep=0)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
for cfg in configs:
    tot_tok = 0; tot = 0.0; first_tot = 0.0
    per = []
    for p in sel:
        if cfg.startswith("gen"):
            ids = model.chat_prompt(p["messages"])
            draft = None if cfg == "gen-plain" else "auto"
            t0 = time.perf_counter(); first = None; n = 0
            for r in stream(model, ids, draft=draft, config=SpecConfig(max_tokens=128), learned=learned):
                if first is None: first = time.perf_counter() - t0
                pass
            wall = time.perf_counter() - t0
            n = r.stats.n_tokens
        else:
            if cfg == "chat-plain":
                chat.speculator = None
            else:
                floor = float(cfg.split(":")[1])
                sp = chat.speculator if chat.speculator is not None else BatchSpeculator.over(NgramDrafter(), target_costs(model, learned), batch_floor=floor)
                if "nogate" in cfg: sp.gate = None
                chat.speculator = sp
            t0 = time.perf_counter()
            out = chat.chat(ChatRequest(messages=p["messages"], max_tokens=128, temperature=0.0))
            wall = time.perf_counter() - t0; n = out.usage.completion_tokens; first = 0
        tot += wall; tot_tok += n; first_tot += first
        per.append(f"{p['id']}:{n/wall:.1f}")
    print(f"{cfg}: {tot_tok/tot:.2f} tok/s ({tot_tok} in {tot:.1f}s, prefill {first_tot:.1f}s) " + " ".join(per), flush=True)
