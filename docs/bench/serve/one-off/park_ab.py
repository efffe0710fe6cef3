"""In process, as coinfer serve batches (8 slots, keep 2; the served speculative engine, a fresh
speculator each run as a fresh server has): prompts FIRST..LAST of build_suite(11) all at once, 128
greedy tokens each, with kept caches parked (moved to the highest free stream) and running requests packed
into the gaps (move), or neither (stay). Runs alternate, the order reversed every other round.
Usage: park_ab.py ROUNDS [FIRST,LAST] [plain]"""
import sys
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.cost_curve import CostCurve
from coinfer.decoding.ngram import NgramDrafter
sys.path.insert(0, "/work/main/docs/bench/serve/one-off")
from served_batch import open_served_batch, run_prompts

rounds = int(sys.argv[1])
lo, hi = (int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "16,32").split(","))
spec_on = not (len(sys.argv) > 3 and sys.argv[3] == "plain")
chat, model, suite, _ = open_served_batch(11)
park, pack = model.park, model.pack
greedy = model.extend_many_greedy
choices = model.extend_many_choices
stats = {}
def watch(fn, key):
    def w(items):
        if True:
            p = model.pass_rows([(s, 1) for s, _ in items])
            stats[key][0] += 1
            stats[key][1] += len(p) > 1
        return fn(items)
    return w
texts = {}
for r in range(rounds):
    for name in (["move", "stay"] if r % 2 == 0 else ["stay", "move"]):
        model.park, model.pack = (park, pack) if name == "move" else ((lambda seq: seq),) * 2
        stats["plain"] = [0, 0]
        model.extend_many_greedy = watch(greedy, "plain")
        model.extend_many_choices = watch(choices, "plain")
        chat.speculator = BatchSpeculator.over(NgramDrafter(), CostCurve(), batch_floor=0.0) if spec_on else None
        jobs, wall = run_prompts(chat, suite, lo, hi, speculate=spec_on)
        toks = sum(len(j.tokens) for j in jobs)
        same = sum(texts.setdefault(j.request, j.tokens) == j.tokens for j in jobs)
        n, split = stats["plain"]
        print(f"round {r + 1} {name}: {toks / wall:.2f} tok/s ({toks} in {wall:.1f}s), drafted {sum(j.drafted for j in jobs)} kept {sum(j.accepted for j in jobs)},"
              f" decoding forwards {n} of which over split streams {split}, same tokens as the first run {same}/{len(jobs)}", flush=True)
