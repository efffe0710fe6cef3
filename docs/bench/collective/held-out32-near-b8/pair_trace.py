"""Every pair the split judge reads on plain batch-8 decoding of one category's held-out
prompts (the bench's plain configuration), runs in a row on one target as the bench does:
what each split and whole forward of 8 tokens took, and the pairs' ratios.

Run: ``python docs/bench/collective/held-out32-near-b8/pair_trace.py followup 3 [ngram]``.
It writes ``pair_trace_CATEGORY[_ngram].json`` in the working directory (every forward by
shape and time). With ``ngram``, the n-gram source drafts and ``s`` is chosen online (as
+selector with the n-gram source alone), and each pair prints the rows of both forwards.
"""

import json
import statistics
import sys
import time

from coinfer.bench.collective import CollectiveBenchConfig, _drafters, bench_workload, load_bench_model
from coinfer.engines import collective
from coinfer.engines.collective import split
from coinfer.engines.collective.config import CollectiveConfig

category, runs = sys.argv[1], int(sys.argv[2])
drafting = len(sys.argv) > 3 and sys.argv[3] == "ngram"  # n-gram drafts, s chosen online
suite = bench_workload(CollectiveBenchConfig(out="x", suite="broad", split="held-out", per_category=32))
messages = [p["messages"] for p in suite if p["category"] == category]
target = load_bench_model("qwen2.5-coder-1.5b", 4096 * 8)
prompts = [target.chat_prompt(m) for m in messages]

log: list[dict] = []
measured = split.SplitJudge.measured


def traced(self, tokens, split, seconds):  # noqa: ANN001, ANN202
    before = {n: list(s.ratios) for n, s in self._sizes.items()}
    measured(self, tokens, split, seconds)
    after = list(self._sizes[tokens].ratios)
    new = after[-1] if after and after != before.get(tokens) else None
    parts = [r for r, _, _ in shapes[len(shapes) - (2 if split else 1) :]]
    log.append(
        {
            "v": self.verified,
            "tokens": tokens,
            "split": split,
            "s": round(seconds, 4),
            "pair": new,
            "rows": parts,
        }
    )


split.SplitJudge.measured = traced
extend = target.extend_many
shapes: list[tuple[int, int, float]] = []


def timed_extend(items, **kw):  # noqa: ANN001, ANN003, ANN202
    t = time.perf_counter()
    out = extend(items, **kw)
    shapes.append((len(items), sum(len(ids) for _, ids in items), time.perf_counter() - t))
    return out


target.extend_many = timed_extend
config = CollectiveConfig(max_tokens=128, draft_tokens="auto" if drafting else 0, max_batch=8)
for run in range(runs):
    start = len(log)
    t = time.perf_counter()
    drafts = _drafters(["ngram"], target, {}, messages) if drafting else []
    collective.generate(target, prompts, drafts=drafts, config=config)
    mine = [e for e in log[start:] if e["tokens"] == 8]
    whole = [e["s"] for e in mine if not e["split"]]
    cut = [e["s"] for e in mine if e["split"]]
    pairs = [e["pair"] for e in mine if e["pair"] is not None]
    print(
        f"run {run + 1}: {time.perf_counter() - t:.1f} s; forwards of 8 tokens: {len(whole)} whole "
        f"(median {statistics.median(whole) * 1000 if whole else 0:.1f} ms), {len(cut)} split "
        f"(median {statistics.median(cut) * 1000 if cut else 0:.1f} ms); pairs {pairs}",
        flush=True,
    )
    made = [e for e in mine if e["pair"] is not None]
    for e in made:  # the pair just made, and the forward it paired with
        other = [o for o in mine if o["split"] != e["split"] and 0 < e["v"] - o["v"] <= split.PAIR_GAP]
        print(
            f"   pair {e['pair']:.3f}: this {'split' if e['split'] else 'whole'} rows {e['rows']} "
            f"{e['s'] * 1000:.0f} ms; other rows {other[-1]['rows'] if other else '?'} "
            f"{other[-1]['s'] * 1000 if other else 0:.0f} ms",
            flush=True,
        )
json.dump(
    {"log": log, "shapes": shapes}, open(f"pair_trace_{category}{'_ngram' if drafting else ''}.json", "w")
)
target.close()
