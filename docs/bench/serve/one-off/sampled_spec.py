"""In process, as coinfer serve batches (8 slots; the served speculative engine's speculator, fresh
each run): prompts FIRST..LAST of build_suite(11) all at once, 128 tokens each, sampled at TEMP with
seed = the prompt's index, speculating or plain; runs alternate, the order reversed every other round.
Prints tok/s, drafted and kept tokens, and how many texts equal the first plain run's (the same seed
draws the same text, bar the batch shape's near-ties).
Usage: sampled_spec.py ROUNDS TEMP [FIRST,LAST]"""
import sys
import time
from collections import deque

from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.cost_curve import CostCurve
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.sampling import SamplingParams

sys.path.insert(0, "/work/main/docs/bench/serve/one-off")
from served_batch import open_served_batch

rounds, temp = int(sys.argv[1]), float(sys.argv[2])
lo, hi = (int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "16,24").split(","))
chat, model, suite, _ = open_served_batch(11)
texts = {}
for r in range(rounds):
    for name in (["plain", "spec"] if r % 2 == 0 else ["spec", "plain"]):
        chat.speculator = BatchSpeculator.over(NgramDrafter(), CostCurve(), batch_floor=0.0)
        jobs = []
        for i in range(lo, hi):
            prompt = model.chat_prompt(suite[i]["messages"])
            jobs += chat.new_jobs(i, prompt, n=1, max_tokens=128, params=SamplingParams(temperature=temp, seed=i),
                                  speculate=name == "spec")
        waiting, running = deque(jobs), []
        t0 = time.perf_counter()
        while waiting or running:
            running = chat.step(waiting, running)
        wall = time.perf_counter() - t0
        toks = sum(len(j.tokens) for j in jobs)
        same = sum(texts.setdefault(j.request, j.tokens) == j.tokens for j in jobs)
        print(f"round {r + 1} {name}: {toks / wall:.2f} tok/s ({toks} in {wall:.1f}s), drafted "
              f"{sum(j.drafted for j in jobs)} kept {sum(j.accepted for j in jobs)}, same tokens as the first run "
              f"{same}/{len(jobs)}", flush=True)
