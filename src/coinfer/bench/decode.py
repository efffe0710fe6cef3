"""``coinfer bench decode``: what one forward costs, per model and backend.

For each model it measures greedy decode tokens/s (one token per forward, KV cached)
and the median wall time of one forward over k tokens on top of a cached prompt, for
k = 1, 2, 4, 8, 16, 32: the cost curve that speculative engines plan with. Results go to
``results.json`` and ``results.md`` in the output directory.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coinfer.bench.report import environment, write_json, write_markdown
from coinfer.errors import CoinferError, ConfigError
from coinfer.models import SteerableModel, load_model

__all__ = [
    "DecodeBenchConfig",
    "forward_ms",
    "measure_model",
    "run_decode_bench",
    "spread_tokens",
    "timed_forward",
]

PROMPT = (
    "Write a Python function `merge_intervals(intervals)` that merges overlapping intervals "
    "and returns them sorted. Explain the algorithm briefly, then give the code with a docstring "
    "and two doctest examples."
)


@dataclass(frozen=True)
class DecodeBenchConfig:
    out: str
    models: tuple[str, ...]
    backends: tuple[str, ...] = ("llama.cpp", "transformers")
    ks: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    decode_tokens: int = 64
    repeats: int = 5
    n_threads: int | None = None
    transformers_models: tuple[str, ...] | None = None  # None: every model

    def __post_init__(self) -> None:
        if not self.models or not self.backends:
            raise ConfigError("bench decode needs at least one model and one backend")
        if min(self.ks, default=1) < 1 or self.decode_tokens < 2 or self.repeats < 1:
            raise ConfigError("ks must be >= 1, decode_tokens >= 2 and repeats >= 1")


def _decode_rate(model: SteerableModel, prompt: list[int], n: int) -> float:
    """Greedy tokens/s over ``n`` single-token forwards after the prompt (EOS ignored)."""
    seq = model.new_sequence()
    try:
        logits = model.extend(seq, prompt, last_only=True)[-1]
        start = time.perf_counter()
        for _ in range(n):
            logits = model.extend(seq, [int(np.argmax(logits))])[-1]
        return n / (time.perf_counter() - start)
    finally:
        model.release(seq)


def forward_ms(model: SteerableModel, prompt: list[int], k: int, repeats: int, rows: int = 1) -> float:
    """Median ms of one forward over k tokens on top of the cached prompt (then rolled
    back); with ``rows``, one batched forward over as many sequences, each on top of its
    own copy of the prompt, with the k tokens spread as evenly as the rows allow."""
    seqs = [model.new_sequence() for _ in range(rows)]
    try:
        model.extend_many([(seq, prompt) for seq in seqs], last_only=True)
        items = spread_tokens(seqs, prompt, k)
        times = [timed_forward(model, items, len(prompt)) for _ in range(repeats + 1)]
        return 1000 * statistics.median(times[1:])  # the first run warms caches and allocators
    finally:
        for seq in seqs:
            model.release(seq)


def spread_tokens(seqs: list[Any], prompt: list[int], k: int) -> list[tuple[Any, list[int]]]:
    """One batched forward's items: k tokens (the prompt's, repeated) spread over the
    sequences as evenly as they allow."""
    if not 1 <= len(seqs) <= k:
        raise ConfigError(f"a forward over {k} tokens has 1 to {k} rows, not {len(seqs)}")
    tokens = (prompt * (k // len(prompt) + 1))[:k]
    cuts = [k * i // len(seqs) for i in range(len(seqs) + 1)]
    return [(seq, tokens[a:b]) for seq, a, b in zip(seqs, cuts, cuts[1:], strict=False)]


def timed_forward(model: SteerableModel, items: list[tuple[Any, list[int]]], keep: int) -> float:
    """Seconds of one forward over ``items``, whose sequences are then rolled back to
    their first ``keep`` tokens."""
    start = time.perf_counter()
    model.extend_many(items)
    elapsed = time.perf_counter() - start
    for seq, _ in items:
        model.truncate(seq, keep)
    return elapsed


def measure_model(model: SteerableModel, config: DecodeBenchConfig) -> dict[str, Any]:
    if model.template.source:
        prompt = model.chat_prompt([{"role": "user", "content": PROMPT}])
    else:  # a base model without a chat template (gemma-3-270m): the same text, plain
        prompt = model.text_prompt(PROMPT)
    seq = model.new_sequence()
    start = time.perf_counter()
    model.extend(seq, prompt, last_only=True)
    prefill_ms = 1000 * (time.perf_counter() - start)
    model.release(seq)
    return {
        "prompt_tokens": len(prompt),
        "prefill_ms": round(prefill_ms, 2),
        "decode_tokens_per_s": round(_decode_rate(model, prompt, config.decode_tokens), 2),
        "forward_ms": {str(k): round(forward_ms(model, prompt, k, config.repeats), 2) for k in config.ks},
    }


def _runs(config: DecodeBenchConfig) -> list[tuple[str, str]]:
    runs = []
    for backend in config.backends:
        for name in config.models:
            limit = config.transformers_models if backend == "transformers" else None
            if limit is not None and name not in limit:
                continue
            runs.append((name, backend))
    return runs


def run_decode_bench(config: DecodeBenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for name, backend in _runs(config):
        log(f"bench decode: {name} on {backend}…")
        row: dict[str, Any] = {"model": name, "backend": backend}
        try:
            start = time.perf_counter()
            model = load_model(name, backend=backend, n_threads=config.n_threads)
            row["load_s"] = round(time.perf_counter() - start, 2)
            try:
                row.update(measure_model(model, config))
            finally:
                model.close()
        except CoinferError as exc:
            row["error"] = str(exc).splitlines()[0]
            log(f"  skipped: {row['error']}")
        rows.append(row)
        if "error" not in row:
            log(f"  {row['decode_tokens_per_s']} tok/s; forward ms {row['forward_ms']}")
    out = Path(config.out)
    report = {"config": asdict(config), "environment": environment(), "results": rows}
    files = {"json": str(out / "results.json"), "markdown": str(out / "results.md")}
    write_json(out / "results.json", report)
    write_markdown(out / "results.md", _markdown(rows, config))
    report["files"] = files
    return report


def _markdown(rows: list[dict[str, Any]], config: DecodeBenchConfig) -> str:
    head = ["model", "backend", "decode tok/s", *[f"k={k} ms" for k in config.ks], "load s"]
    lines = ["# coinfer bench decode", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            cells = [r["model"], r["backend"], "skipped: " + r["error"], *[""] * len(config.ks), ""]
        else:
            cells = [
                r["model"],
                r["backend"],
                f"{r['decode_tokens_per_s']:.1f}",
                *[f"{r['forward_ms'][str(k)]:.1f}" for k in config.ks],
                f"{r['load_s']:.1f}",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Forward over k tokens: median wall time of one `extend` of k tokens on top of a",
        "cached chat prompt (then rolled back). Decode: greedy, one token per forward.",
    ]
    return "\n".join(lines) + "\n"
