"""One request at a time (as the 1-client level), in process as coinfer serve batches them:
plain, the served speculative engine (n-gram, floor 0, the drafting gate), and the same without
the gate. Per configuration: tok/s, the steps that drafted / did not, the gate's rates.
Usage: width1_gate.py plain,spec,nogate tune|held|all [PER]"""
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

cfgs, half = sys.argv[1].split(","), sys.argv[2]
per = int(sys.argv[3]) if len(sys.argv) > 3 else 6
chat = open_local_chat("qwen2.5-coder-1.5b", n_ctx=4096)
model = chat.model
suite = build_suite(per_category=per)
idx = [i for i in range(len(suite)) if half == "all" or (i % 4 == 3) == (half == "held")]
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
learned = Learned()
for cfg in cfgs:
    chat.speculator = None if cfg == "plain" else BatchSpeculator.over(NgramDrafter(), target_costs(model, learned), batch_floor=0.0)
    if cfg == "nogate":
        chat.speculator.gate = None
    toks = 0; t0 = time.perf_counter(); dsteps = psteps = 0; ds = ps = 0.0; dt = pt = 0; read_s = 0.0
    for i in idx:
        jobs = chat.new_jobs(i, model.chat_prompt(suite[i]["messages"]), n=1, max_tokens=128, params=SamplingParams(temperature=0.0))
        waiting, running = deque(jobs), []
        while waiting or running:
            before = (sum(len(j.tokens) for j in jobs), sum(j.drafted for j in jobs))
            reading = any(j.read < len(j.prompt) for j in jobs) or bool(waiting)
            ts = time.perf_counter()
            running = chat.step(waiting, running)
            s = time.perf_counter() - ts
            tok = sum(len(j.tokens) for j in jobs) - before[0]
            if reading:
                read_s += s
            elif sum(j.drafted for j in jobs) > before[1]:
                dsteps += 1; ds += s; dt += tok
            else:
                psteps += 1; ps += s; pt += tok
        toks += sum(len(j.tokens) for j in jobs)
    wall = time.perf_counter() - t0
    g = chat.speculator.gate.rates() if chat.speculator is not None and chat.speculator.gate else {}
    print(f"{cfg}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s; reading steps {read_s:.1f}s) drafting steps {dsteps} ({dt} tok in {ds:.1f}s)"
          f" plain steps {psteps} ({pt} tok in {ps:.1f}s) decode-only {(dt+pt)/max(ds+ps,1e-9):.2f} tok/s gate {g}", flush=True)
