import sys, time
from collections import deque
from coinfer.chat import open_local_chat
from coinfer.chat.base import ChatRequest
from coinfer.bench.workloads import build_suite
from coinfer import catalog
catalog.prepare("qwen2.5-coder-1.5b")
suite = build_suite(11)[:16]
chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096, parallel=8)
reqs = [ChatRequest(messages=p["messages"], max_tokens=128) for p in suite]
first_n = int(sys.argv[1])  # jobs that arrive before the first step; the rest after it
off = int(sys.argv[2]) if len(sys.argv) > 2 else 0  # the first comers: jobs[off:off + first_n]
for rnd in range(1):
    jobs = chat.jobs_for(reqs)
    print("prompt lengths", sorted(len(j.prompt) for j in jobs))
    early = jobs[off:off + first_n]
    waiting, running = deque(early), []
    t0 = time.perf_counter(); step = 0; firsts = {}
    while len(firsts) < 9:
        before = {id(j): j.read for j in running + list(waiting)}
        s0 = time.perf_counter()
        running = chat.step(waiting, running)
        if step == 0:
            waiting.extend(j for j in jobs if j not in early)
        read = sum(j.read - before.get(id(j), 0) for j in running)
        for j in running:
            if j.tokens and id(j) not in firsts:
                firsts[id(j)] = time.perf_counter() - t0
        print(f"step {step} t={time.perf_counter()-t0:.2f} took {time.perf_counter()-s0:.2f}s read {read} running {len(running)} reading {sum(1 for j in running if j.reading)} firsts {len(firsts)}", flush=True)
        step += 1
    print("firsts", sorted(round(v, 1) for v in firsts.values()), flush=True)
    chat.abandon(running + list(waiting))
