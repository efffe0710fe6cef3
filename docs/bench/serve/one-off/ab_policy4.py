import os, sys
from coinfer.chat.local import open_local_chat
from coinfer.chat.base import ChatRequest
# FLOOR: the batch floor (the served engine: 0; the first runs of 2026-12-05: 0.97)
from coinfer.decoding.batch_speculation import BatchSpeculator, DraftingGate, BATCH_COPY_MISS
from coinfer.decoding.draft_length import AdaptiveDraftLength, DraftSizer
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.bench.workloads import build_suite
from in_flight import run_in_flight
modes = sys.argv[1].split(","); clients = int(sys.argv[2]); per = int(sys.argv[3]); temp = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096)
model = chat.model
suite = build_suite(per_category=per)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
VARIANTS = {
    "default": {},
    "lenient": dict(caution=0.0, copy_ratio_caution=0.0, required_gain=1.0),
    "nocaution": dict(caution=0.0),
    "noratio": dict(copy_ratio_caution=0.0),
    "plain": None,
}
for mode in modes:
    kw = VARIANTS[mode]
    if kw is None:
        chat.speculator = None
    else:
        pol = AdaptiveDraftLength(costs=target_costs(model, Learned()), batch_floor=float(os.environ.get("FLOOR", "0")), batch_copy_miss=BATCH_COPY_MISS, **kw)
        chat.speculator = BatchSpeculator(NgramDrafter(), DraftSizer(pol), DraftingGate())
    jobs, wall, steps = run_in_flight(chat, suite, clients, speculate=kw is not None, temperature=temp)
    toks = sum(len(j.tokens) for j in jobs)
    print(f"{mode}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s), {steps} steps, drafted {sum(j.drafted for j in jobs)} accepted {sum(j.accepted for j in jobs)}", flush=True)
