"""The churn test's storm in process, deterministic: SmolLM2-135M (as the 64-client load test
loads it), 8 slots, a cache per sequence, no kept caches; the load test's 64 prompts arrive
in a seeded random order, 0-12 a step, and 21 of them leave mid-answer. Prints, per seed,
the finished requests whose greedy 24 tokens differ from the same request alone.

    .venv/bin/python docs/bench/serve/one-off/churn_in_process.py fcfs|shortest SEED[,SEED...]

``fcfs``: waiting requests admitted in arrival order (the rule before 2026-12-04);
``shortest``: ``chat.admission``'s order."""

import random
import sys
from collections import deque

import coinfer.chat.local as local
from coinfer.bench.serve_load import load_prompts
from coinfer.chat.local import open_local_chat
from coinfer.decoding.sampling import SamplingParams

mode, seeds = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
if mode == "fcfs":
    local.next_admitted = lambda waiting, to_read, due: waiting[0] if to_read(waiting[0]) is not None else None
chat = open_local_chat("smollm2-135m", n_ctx=1024, parallel=8, keep=0)
prompts = [chat.model.chat_prompt([{"role": "user", "content": p}]) for p in load_prompts(64, 160)]
alone = {}
for i, p in enumerate(prompts):
    jobs = chat.new_jobs(i, p, n=1, max_tokens=24, params=SamplingParams())
    chat._run(jobs)
    alone[i] = jobs[0].tokens
for seed in seeds:
    rng = random.Random(seed)
    order = list(range(64))
    rng.shuffle(order)
    waiting, running, jobs = deque(), [], {}
    leave = set(rng.sample(range(64), 21))
    step = 0
    while order or waiting or running:
        for _ in range(rng.choice([0, 0, 1, 2, 4, 8]) if step else 12):
            if order:
                i = order.pop()
                jobs[i] = chat.new_jobs(i, prompts[i], n=1, max_tokens=24, params=SamplingParams())[0]
                waiting.append(jobs[i])
        for i in list(leave):
            if i in jobs and len(jobs[i].tokens) >= 3 and rng.random() < 0.3:
                chat.cancel(jobs[i], waiting)
                leave.discard(i)
        running = chat.step(waiting, running)
        step += 1
    different = [i for i, j in jobs.items() if j.finish in ("stop", "length") and j.tokens != alone[i]]
    print(mode, seed, "different from alone:", different, flush=True)
