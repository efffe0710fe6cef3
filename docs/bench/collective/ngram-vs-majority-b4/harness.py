"""What ``ab_b4.py`` and ``trace_b4.py`` share: the broad suite's held-out half at
``--per-category 16`` (4 prompts a category), the bench's models, and its
configurations at batch 4, by name."""

from dataclasses import replace
from typing import Any

from coinfer.bench.collective import CollectiveBenchConfig, bench_workload, configurations, load_bench_model

NAMES = {"P": "plain", "N": "single:ngram", "M": "+majority"}


def held_out_b4() -> tuple[list[dict[str, Any]], Any, dict[str, Any], dict[str, tuple[Any, Any]]]:
    """(suite, target, draft models by name, (drafts, engine config) by configuration)."""
    cfg = CollectiveBenchConfig(
        out="x", suite="broad", split="held-out", per_category=16, category_workloads=True, batch_sizes=[4]
    )
    target = load_bench_model(cfg.target, cfg.n_ctx * 4)
    models = {d: load_bench_model(d, cfg.n_ctx * 4) for d in cfg.drafts if d != "ngram"}
    engines = {name: (specs, replace(e, max_batch=4)) for name, specs, e in configurations(cfg)}
    return bench_workload(cfg), target, models, engines
