"""A/B of draft-policy variants in process, as coinfer serve batches (8 slots, the served
speculative engine: n-gram, floor 0, the gate): prompts FIRST..LAST of build_suite(11) all at
once, 128 greedy tokens each. Each variant keeps one speculator over all its runs (as a
server's session does); the variants' runs alternate, the order reversed every other round.
Usage: ab_policy.py VARIANTS ROUNDS [FIRST,LAST]   VARIANTS: comma-separated names below.
``base`` builds the policy with copy_prior's miss at 1.0, as the served engine did when this
ran (before a82387c); ``missX`` sets the miss at every width. BatchSpeculator.over now gives
BATCH_COPY_MISS (0.8) to steps of two or more requests only (46d0882)."""
import sys
from coinfer.decoding.batch_speculation import BatchSpeculator, DraftingGate
from coinfer.decoding.draft_length import AdaptiveDraftLength, DraftSizer
from coinfer.decoding.drafters import Draft
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from served_batch import open_served_batch, run_prompts


class DeepOnly(NgramDrafter):
    """Proposes only copies matched over at least ``least`` tokens."""
    def __init__(self, least, **kw):
        super().__init__(**kw)
        self.least = least
    def _propose(self, lookup, context, k):
        d = super()._propose(lookup, context, k)
        m = getattr(d.bucket, "match", None)
        return d if m is None or m >= self.least else Draft([])


def speculator(name, model):
    costs = target_costs(model, Learned())
    drafter, kw = NgramDrafter(), {}
    if name.startswith("deep"):
        drafter = DeepOnly(int(name[4:]))
    elif name.startswith("miss"):
        kw["copy_miss"] = float(name[4:])
    elif name.startswith("caution"):
        kw["caution"] = float(name[7:])
    elif name != "base":
        raise SystemExit(f"unknown variant {name}")
    return BatchSpeculator(drafter, DraftSizer(AdaptiveDraftLength(costs=costs, batch_floor=0.0, **kw)), DraftingGate())


names, rounds = sys.argv[1].split(","), int(sys.argv[2])
lo, hi = (int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "16,33").split(","))
chat, model, suite, _ = open_served_batch(11)
specs = {n: speculator(n, model) for n in names}
texts = {}
for r in range(rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
        chat.speculator = specs[name]
        jobs, wall = run_prompts(chat, suite, lo, hi, speculate=True)
        toks = sum(len(j.tokens) for j in jobs)
        same = sum(texts.setdefault(j.request, j.tokens) == j.tokens for j in jobs)
        print(f"round {r + 1} {name}: {toks / wall:.2f} tok/s ({toks} in {wall:.1f}s), drafted {sum(j.drafted for j in jobs)}"
              f" kept {sum(j.accepted for j in jobs)}, same tokens as the first run {same}/{len(jobs)}", flush=True)
