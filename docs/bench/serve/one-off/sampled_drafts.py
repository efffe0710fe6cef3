"""Drafted and kept tokens, greedy against sampled, in the 16-prompt, 8-slot in-process run
(the speculative engine only), and what the draft sizer cut from the drafter's proposals.
Usage: sampled_drafts.py 0,0.7 (temperatures; sampled requests seeded by their index)."""
import sys, time
from collections import deque
from coinfer.chat.local import open_local_chat
from coinfer.chat.base import ChatRequest
from coinfer.decoding import batch_speculation as bs
from coinfer.decoding.batch_speculation import BatchSpeculator, accepted_length
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.decoding.sampling import SamplingParams
from coinfer.bench.workloads import build_suite
stats = {}
orig = BatchSpeculator.accepted
def counting(self, key, context, draft, choices):
    s = stats.setdefault("cur", [0, 0, 0])
    if draft:
        s[0] += 1; s[1] += len(draft); s[2] += accepted_length(draft, choices)
    return orig(self, key, context, draft, choices)
BatchSpeculator.accepted = counting
orig_drafts = BatchSpeculator.drafts
def drafts(self, rows, others, passes=None):
    out = orig_drafts(self, rows, others, passes)
    d = stats["drafts"]  # drafting steps, rows offered, tokens proposed, tokens after the cut
    d[0] += 1; d[1] += len(rows); d[2] += out.proposed; d[3] += sum(map(len, out.drafts))
    return out
BatchSpeculator.drafts = drafts
chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096)
model = chat.model
suite = build_suite(per_category=11)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
for temp in [float(t) for t in sys.argv[1].split(",")]:
    stats["cur"] = [0, 0, 0]; stats["drafts"] = [0, 0, 0, 0]
    chat.speculator = BatchSpeculator.over(NgramDrafter(), target_costs(model, Learned()), batch_floor=0.0)
    jobs = []
    for i in range(16):
        prompt = model.chat_prompt(suite[i]["messages"])
        jobs += chat.new_jobs(i, prompt, n=1, max_tokens=128, params=SamplingParams(temperature=temp, seed=i), speculate=True)
    waiting, running = deque(jobs), []
    t0 = time.perf_counter(); steps = 0
    while waiting or running:
        running = chat.step(waiting, running); steps += 1
    wall = time.perf_counter() - t0
    toks = sum(len(j.tokens) for j in jobs)
    n, drafted, kept = stats["cur"]
    print(f"temp {temp}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s), {steps} steps; {n} drafts, {drafted} drafted tokens, {kept} kept ({kept/max(drafted,1):.0%}), {drafted/max(n,1):.2f} a draft; drafting steps {stats['drafts'][0]}, rows offered {stats['drafts'][1]}, proposed {stats['drafts'][2]}, after the cut {stats['drafts'][3]}", flush=True)
