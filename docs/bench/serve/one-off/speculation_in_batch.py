import sys, time, collections
from coinfer.models import load_model
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.decoding.batch_speculation import BatchSpeculator, DraftingGate
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.bench.workloads import build_suite

width = int(sys.argv[1]); configs = sys.argv[2].split(",")
n = int(sys.argv[3]) if len(sys.argv) > 3 else 12
import os
if os.environ.get("UNIFIED", "1") == "1":
    model = load_model("qwen2.5-coder-1.5b", n_ctx=4096 * max(width, 1))
else:  # as coinfer serve loads it (open_local_chat): a cache per conversation
    model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=width + 2, kv_unified=False)
suite = build_suite(per_category=int(__import__("os").environ.get("PER", "6")))
held = [p for i, p in enumerate(suite) if i % 4 == 3]
tune = [p for i, p in enumerate(suite) if i % 4 != 3]
which = {"tune": tune, "held": held, "all": suite}[sys.argv[4] if len(sys.argv) > 4 else "tune"]
reqs = [ChatRequest(messages=p["messages"], max_tokens=128, temperature=0.0) for p in which[:n]]
learned = Learned()
chat = LocalChat(model, max_concurrent=width, keep=0)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
for cfg in configs:
    if cfg == "plain":
        chat.speculator = None
    else:
        floor = float(cfg.split(":")[1]); gate = "nogate" not in cfg
        sp = BatchSpeculator.over(NgramDrafter(), target_costs(model, learned), batch_floor=floor)
        if not gate: sp.gate = None
        chat.speculator = sp
    stats = collections.Counter()
    if chat.speculator is not None:
        orig = chat.speculator.drafts
        def drafts(rows, others, orig=orig):
            d, s, p = orig(rows, others); stats["steps"] += 1; stats["drafted"] += sum(map(len, d)); stats["rows"] += len(rows) + others
            return d, s, p
        chat.speculator.drafts = drafts
        oacc = chat.speculator.accepted
        def accepted(key, context, draft, choices, oacc=oacc):
            kept = oacc(key, context, draft, choices); stats["kept"] += len(kept) - 1; return kept
        chat.speculator.accepted = accepted
    t0 = time.perf_counter(); outs = chat.chat_batch(reqs); wall = time.perf_counter() - t0
    toks = sum(o.usage.completion_tokens for o in outs)
    g = chat.speculator.gate.rates() if chat.speculator is not None and chat.speculator.gate else {}
    print(f"width {width} {cfg}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s) {dict(stats)} gate {g}", flush=True)
