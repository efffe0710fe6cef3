import os, sys
from coinfer.chat.local import open_local_chat
from coinfer.chat.base import ChatRequest
from coinfer.decoding import batch_speculation as bs
from coinfer.decoding.batch_speculation import BatchSpeculator
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
pays = bs.DraftingGate.pays
for mode in modes:
    bs.DraftingGate.pays = pays if mode == "beside" else (lambda self, w: False)
    # FLOOR: the batch floor (the served engine: 0; the first runs of 2026-12-05: 0.97)
    chat.speculator = BatchSpeculator.over(NgramDrafter(), target_costs(model, Learned()), batch_floor=float(os.environ.get("FLOOR", "0")))
    jobs, wall, steps = run_in_flight(chat, suite, clients, speculate=True, temperature=temp)
    toks = sum(len(j.tokens) for j in jobs)
    print(f"{mode}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s), {steps} steps, drafted {sum(j.drafted for j in jobs)} accepted {sum(j.accepted for j in jobs)}", flush=True)
