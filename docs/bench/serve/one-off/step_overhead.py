"""Where a 16-prompt, 8-slot in-process run's seconds go: llama_decode, reading logits, the rest (Python).
Usage: step_overhead.py spec,plain [TEMP TOP_P] (greedy by default; sampled requests seeded by their index).
Since 2026-12-06 each line also names the temperature and counts the drafts (sampled_cdf.txt); the earlier
records (step_overhead.txt, step_overhead_sampled.txt) were printed without them."""
import sys, time
from collections import deque
from coinfer.chat.local import open_local_chat
from coinfer.chat.base import ChatRequest
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.decoding.sampling import SamplingParams
from coinfer.bench.workloads import build_suite
cfgs = sys.argv[1].split(",")
temp, top_p = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else (0.0, 1.0)
chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096)
model = chat.model
suite = build_suite(per_category=11)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
learned = Learned()
for cfg in cfgs:
    chat.speculator = None if cfg == "plain" else BatchSpeculator.over(NgramDrafter(), target_costs(model, learned), batch_floor=0.0)
    jobs = []
    for i in range(16):
        prompt = model.chat_prompt(suite[i]["messages"])
        jobs += chat.new_jobs(i, prompt, n=1, max_tokens=128, params=SamplingParams(temperature=temp, top_p=top_p, seed=i), speculate=cfg != "plain")
    waiting, running = deque(jobs), []
    c0, l0 = model.clock.compute_s, model.clock.logits_s
    t0 = time.perf_counter(); steps = 0
    while waiting or running:
        running = chat.step(waiting, running); steps += 1
    wall = time.perf_counter() - t0
    comp, logi = model.clock.compute_s - c0, model.clock.logits_s - l0
    toks = sum(len(j.tokens) for j in jobs)
    print(f"{cfg} t={temp}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s), {steps} steps, drafted {sum(j.drafted for j in jobs)} accepted {sum(j.accepted for j in jobs)}; llama_decode {comp:.1f}s, logits {logi:.2f}s, rest {wall-comp-logi:.2f}s ({(wall-comp-logi)/wall:.1%}; {(wall-comp-logi)/steps*1000:.1f} ms a step)", flush=True)
