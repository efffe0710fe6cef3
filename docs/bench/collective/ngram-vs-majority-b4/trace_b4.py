"""Trace the n-gram sizer's batch cuts (``AdaptiveDraftLength.trim_together``) under
single:ngram and +majority at batch 4: per cut, the tokens each request proposed, their
buckets, survivals and records, what was kept, and the fresh cost curve.
Run: ``python trace_b4.py edit NN trace.json``; then ``trace_summary.py trace.json 1``."""

import json
import sys
from dataclasses import replace

from coinfer.bench.collective import (
    CollectiveBenchConfig,
    _measure,
    bench_workload,
    configurations,
    load_bench_model,
)
from coinfer.decoding import draft_length as dl

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
cfg = CollectiveBenchConfig(
    out="x",
    suite="broad",
    split="held-out",
    per_category=16,
    category_workloads=True,
    batch_sizes=[4],
    sweep=False,
)
suite = bench_workload(cfg)
target = load_bench_model(cfg.target, cfg.n_ctx * 4)
models = {d: load_bench_model(d, cfg.n_ctx * 4) for d in cfg.drafts if d != "ngram"}
engines = {name: (specs, replace(e, max_batch=4)) for name, specs, e in configurations(cfg)}
names = {"P": "plain", "N": "single:ngram", "M": "+majority"}
msgs = [p["messages"] for p in suite if p["category"] == cat]
for letter in order:
    name = names[letter]
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
