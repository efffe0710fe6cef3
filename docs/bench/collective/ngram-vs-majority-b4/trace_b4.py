"""Trace the n-gram sizer's batch cuts (``AdaptiveDraftLength.trim_together``) under
single:ngram and +majority at batch 4: per cut, the tokens each request proposed, their
buckets, survivals and records, what was kept, and the fresh cost curve.
Run: ``python trace_b4.py edit NN trace.json``; then ``trace_summary.py trace.json 1``."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from harness import NAMES, held_out_b4  # noqa: E402

from coinfer.bench.collective import _measure  # noqa: E402
from coinfer.decoding import draft_length as dl  # noqa: E402

cat, order, out = sys.argv[1], sys.argv[2], sys.argv[3]
log: list = []
orig = dl.AdaptiveDraftLength.trim_together


def traced(self, proposals):
    keep = orig(self, proposals)
    curve = self._fresh() if self.costs else {}
    log[-1]["cuts"].append(
        {
            "round": self._rounds,
            "stale": bool(self.costs) and self._stale(len(proposals)),
            "proposed": [n for n, _ in proposals],
            "buckets": [list(b) if isinstance(b, tuple) else b for _, b in proposals],
            "keep": keep,
            "curve": {str(k): round(v * 1000, 1) for k, v in sorted(curve.items())},
            "ratio": round(self.copy_miss_ratio(), 3),
            "surv": [[round(x, 3) for x in self.survival(b, upto=n)[1:]] if n else [] for n, b in proposals],
            "rec": {
                str(b): [
                    [round(t, 2) for t in self._buckets[b].tries[1:49]],
                    [round(p, 2) for p in self._buckets[b].passes[1:49]],
                ]
                for _, b in proposals
                if b in self._buckets
            },
        }
    )
    return keep


dl.AdaptiveDraftLength.trim_together = traced
suite, target, models, engines = held_out_b4()
msgs = [p["messages"] for p in suite if p["category"] == cat]
for letter in order:
    name = NAMES[letter]
    log.append({"config": name, "cuts": []})
    specs, engine = engines[name]
    responses, wall = _measure(target, models, msgs, specs, engine)
    ex = responses[0].extras
    log[-1].update(wall=wall, verify_s=ex["verify_s"], shapes=ex["forward_shapes"])
    print(
        name,
        round(wall, 1),
        ex["verify_s"],
        sum(ex["forward_shapes"].values()),
        ex["forward_shapes"].get("4x4"),
        flush=True,
    )
    with open(out, "w") as f:
        json.dump(log, f)
