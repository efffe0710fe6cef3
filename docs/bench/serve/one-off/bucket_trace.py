"""Which n-gram drafts pay at a batch of 8: the 16 prompts of the 16-client level, all at
once, 8 slots, in process as coinfer serve batches them (speculative: n-gram, floor 0, gate).
Records every verified draft: step width, its bucket (match grade, warm), its length, tokens kept,
and each step's seconds and rows. Usage: bucket_trace.py OUT [PER] [FIRST,LAST]"""
import sys, time, json
from collections import deque
from coinfer.decoding.sampling import SamplingParams
from served_batch import open_served_batch, watch_verified

out = sys.argv[1]
per = int(sys.argv[2]) if len(sys.argv) > 2 else 11
lo, hi = (int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "0,16").split(","))
chat, model, suite, spec = open_served_batch(per)
proposals, drafts, steps, cur = {}, [], [], {}
def record(key, draft, kept):
    d = proposals[key][1]
    bucket = (getattr(d.bucket, "match", None), getattr(d.bucket, "warm", None), len(d.tokens))
    drafts.append({"w": cur["w"], "b": bucket, "len": len(draft), "kept": kept, "step": len(steps)})
watch_verified(spec, proposals, record)
jobs = []
for i in range(lo, hi):
    prompt = model.chat_prompt(suite[i]["messages"])
    jobs += chat.new_jobs(i, prompt, n=1, max_tokens=128, params=SamplingParams(temperature=0.0))
waiting, running = deque(jobs), []
t0 = time.perf_counter()
while waiting or running:
    cur["w"] = len(running); ts = time.perf_counter()
    before = sum(len(j.tokens) for j in jobs); nd = len(drafts)
    running = chat.step(waiting, running)
    steps.append({"w": cur["w"], "s": time.perf_counter() - ts, "tok": sum(len(j.tokens) for j in jobs) - before, "drafting": len(drafts) > nd})
wall = time.perf_counter() - t0
toks = sum(len(j.tokens) for j in jobs)
print(f"{toks/wall:.2f} tok/s ({toks} in {wall:.1f}s) gate {spec.gate.rates()}", flush=True)
json.dump({"drafts": drafts, "steps": steps, "tok_s": toks / wall}, open(out, "w"))
