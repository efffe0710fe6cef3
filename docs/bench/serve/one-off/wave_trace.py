"""The 16 prompts of the 16-client level, all at once, 8 slots, in process as coinfer serve
batches them (open_local_chat's load; speculative: n-gram, floor 0, gate). Per job: first-token
and end time, tokens, drafted, accepted. Usage: wave_trace.py plain|spec OUT [ORDER]"""
import sys, time, json
from collections import deque
from coinfer.chat.local import open_local_chat
from coinfer.chat.base import ChatRequest
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.decoding.sampling import SamplingParams
from coinfer.bench.workloads import build_suite

cfgs, out = sys.argv[1].split(","), sys.argv[2]
order = [int(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 else list(range(16))
chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096)
model = chat.model
suite = build_suite(per_category=11)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
learned = Learned()
res = {}
for ci, cfg in enumerate(cfgs):
    chat.speculator = None if cfg == "plain" else BatchSpeculator.over(NgramDrafter(), target_costs(model, learned), batch_floor=0.0)
    jobs = []
    for i in order:
        prompt = model.chat_prompt(suite[i]["messages"])
        jobs += chat.new_jobs(i, prompt, n=1, max_tokens=128, params=SamplingParams(temperature=0.0), speculate=cfg != "plain")
    waiting, running = deque(jobs), []
    t0 = time.perf_counter(); first = {}; end = {}; steps = []
    while waiting or running:
        ts = time.perf_counter()
        w = len(running)
        before = {j.request: (len(j.tokens), j.drafted, j.accepted) for j in jobs}
        running = chat.step(waiting, running)
        now = time.perf_counter() - t0
        st = {"t": round(now, 3), "s": round(time.perf_counter() - ts, 3), "w": w, "jobs": {}}
        for j in jobs:
            n = len(j.tokens) + (j.unread is not None)
            if n and j.request not in first: first[j.request] = now
            if j.finish and j.request not in end: end[j.request] = now
            b = before[j.request]
            if (len(j.tokens), j.drafted, j.accepted) != b:
                st["jobs"][j.request] = [len(j.tokens) - b[0], j.drafted - b[1], j.accepted - b[2]]
        steps.append(st)
    wall = time.perf_counter() - t0
    toks = sum(len(j.tokens) for j in jobs)
    print(f"{ci}:{cfg}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s); sorted firsts {[round(x) for x in sorted(first.values())]}", flush=True)
    for j in sorted(jobs, key=lambda j: first[j.request]):
        print(f"   {j.request:3} first {first[j.request]:6.1f} end {end[j.request]:6.1f} n {len(j.tokens):4} drafted {j.drafted:4} accepted {j.accepted:4} rate {len(j.tokens)/(end[j.request]-first[j.request]):.2f}", flush=True)
    g = chat.speculator.gate.rates() if chat.speculator is not None else {}
    print("   gate", g, flush=True)
    res[f"{ci}:{cfg}"] = {"tok_s": toks / wall, "steps": steps, "first": first, "end": end}
json.dump(res, open(out, "w"))
