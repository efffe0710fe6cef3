import sys, time
from coinfer.chat import ChatRequest, open_local_chat
from coinfer.chat import local as L
from coinfer.bench.serve_concurrency import shared_opening
from coinfer.bench.workloads import build_suite

mode = sys.argv[1]
chat = open_local_chat("qwen2.5-coder-0.5b", n_ctx=4096, parallel=8, keep=2)
opening = shared_opening(1500)
suite = build_suite(6)[:16]
reqs = [ChatRequest([*opening, *p["messages"]], max_tokens=32) for p in suite]
if mode == "nowait":
    L.LocalChat._reading_shared = lambda self, prompt, running: False
if mode == "old":
    L.LocalChat._reading_shared = lambda self, prompt, running: False
    orig = L.LocalChat._reusable
    L.LocalChat._reusable = lambda self, prompt, running=(): orig(self, prompt, ())
steps = [0]
orig_step = L.LocalChat.step
def counting(self, w, r):
    steps[0] += 1
    return orig_step(self, w, r)
L.LocalChat.step = counting
jobs_seen = []
orig_jobs = L.LocalChat.jobs_for
t0 = time.perf_counter()
jobs = chat.jobs_for(reqs)
chat._run(jobs)
wall = time.perf_counter() - t0
print(mode, f"wall {wall:.1f}s steps {steps[0]} cached {[j.cached for j in jobs]} prompt {[len(j.prompt) for j in jobs][:4]}", flush=True)
