"""``coinfer bench collective --reprice DIR``: time a finished run's price tables again
and summarize its runs by the new ones.

A run's priced ratios are only as good as its price table (``bench.collective_priced``),
which is timed once, after a batch size's runs, on whatever the machine did then. Timing
it again costs minutes where the run cost an hour, and it changes nothing that the run
measured: the forwards each configuration took, by shape, stay as recorded, and every
configuration is priced by the one new table. The tables replaced are kept in the
results (``forward_ms_replaced``), so nothing is lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from coinfer.bench.collective import (
    CollectiveBenchConfig,
    bench_workload,
    finish,
    load_bench_model,
    price_batch,
)
from coinfer.bench.collective_priced import PRICE_ROUNDS
from coinfer.errors import ConfigError

__all__ = ["reprice", "saved_config"]


def saved_config(saved: dict[str, Any], out: str) -> CollectiveBenchConfig:
    """The bench configuration a results file was written with (fields it lacks take
    their defaults; lists become tuples), writing to ``out``."""
    known = {f.name for f in fields(CollectiveBenchConfig)}
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()}
    values = {k: v for k, v in values.items() if k in known}
    return CollectiveBenchConfig(**{**values, "out": out})


def reprice(out: str, rounds: int = PRICE_ROUNDS, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Time every batch size's price table of the run in ``out`` again, in ``rounds``
    rounds, then rewrite its summary, tables and plots from its recorded forwards."""
    path = Path(out) / "results.json"
    if not path.is_file():
        hint = "pass the --out of a finished bench collective"
        raise ConfigError(f"no results to reprice in {out}", hint=hint)
    report = json.loads(path.read_text())
    config = replace(saved_config(report.get("config") or {}, out), price_rounds=rounds)
    report["config"] = {**vars(config)}
    prompt_messages = bench_workload(config)[0]["messages"]
    target = load_bench_model(config.target, config.n_ctx * max(config.batch_sizes, default=1))
    try:
        prompt = target.chat_prompt(prompt_messages)
        for batch in config.batch_sizes:
            price_batch(report, batch, target, prompt, rounds, log)
    finally:
        target.close()
    return finish(report, config, Path(out))
