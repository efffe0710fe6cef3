"""``coinfer bench copy-bound``: how far copying could speed decoding up, per category.

For each prompt, the target's own greedy output, then prompt lookup (``NgramDrafter``,
with no cap on a shallow match's length) replayed over it against a perfect verifier
that costs nothing: every round keeps the draft's tokens that equal the target's, and
the target's next one. Output tokens over rounds (``bound``) is then the speedup that no
lossless drafter that copies earlier text can pass on that prompt, at any draft length,
on a machine where verifying k tokens costs what one does. On a CPU a wider forward
costs more: ``bound_on_this_machine`` prices the tokens each round produces by the
cheapest forwards that produce them (one over all of them, or several over parts, by
the target's cost of a forward over n tokens measured here against a one-token forward,
``bench.decode.forward_ms``), as if the drafter verified exactly the tokens that hold. A category whose
bound is under a target rules out copying as the way to reach it (issue 21's 1.3x on the
quote category).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coinfer.bench.broad_suite import BROAD_CATEGORIES, broad_suite, split_suite
from coinfer.bench.collective import SPLITS
from coinfer.bench.decode import forward_ms
from coinfer.bench.report import environment, write_json, write_markdown
from coinfer.decoding import NgramDrafter, SamplingParams, SpecConfig, generate
from coinfer.errors import ConfigError
from coinfer.models import SteerableModel

__all__ = ["CopyBoundConfig", "copy_rounds", "cost_curve", "run_copy_bound", "summarize"]


@dataclass(frozen=True)
class CopyBoundConfig:
    out: str
    target: str = "qwen2.5-coder-1.5b"
    categories: tuple[str, ...] = BROAD_CATEGORIES
    split: str = "all"
    per_category: int = 8
    max_tokens: int = 128
    k: int = 64  # the longest copy one round may verify
    repeats: int = 3  # timed forwards per size of the cost curve (the median counts)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.categories) - set(BROAD_CATEGORIES))
        if unknown:
            hint = f"choose from {', '.join(BROAD_CATEGORIES)}"
            raise ConfigError(f"unknown category {unknown[0]!r}", hint=hint)
        if self.split not in SPLITS:
            raise ConfigError(f"unknown split {self.split!r}", hint=f"splits: {', '.join(SPLITS)}")
        if min(self.per_category, self.max_tokens, self.k, self.repeats) < 1:
            raise ConfigError("per_category, max_tokens, k and repeats must be at least 1")


def copy_rounds(prompt: Sequence[int], output: Sequence[int], k: int = 64) -> list[int]:
    """Per round of a perfect, free verifier producing ``output`` after ``prompt`` with
    prompt lookup drafting up to ``k`` tokens, the draft tokens it keeps: each round keeps
    the draft's prefix that equals the output, and one token more (the target's own)."""
    drafter = NgramDrafter(shallow_tokens=k)
    context, done, kept = list(prompt), 0, []
    while done < len(output):
        draft = drafter.propose_many([(0, context)], k)[0].tokens
        held = 0
        while held < len(draft) and done + held < len(output) and draft[held] == output[done + held]:
            held += 1
        step = list(output[done : done + held + 1])
        drafter.feedback(0, context, step)
        context += step
        done += len(step)
        kept.append(len(step) - 1)
    return kept


def _prompts(config: CopyBoundConfig) -> list[dict[str, Any]]:
    suite = split_suite(broad_suite(config.per_category), config.split)
    return [p for p in suite if p["category"] in config.categories]


def measure(
    target: SteerableModel, suite: list[dict[str, Any]], config: CopyBoundConfig
) -> list[dict[str, Any]]:
    """Per prompt: its category, the target's greedy output length and the draft tokens
    each round of the perfect copy verifier keeps."""
    rows = []
    spec = SpecConfig(max_tokens=config.max_tokens, sampling=SamplingParams())
    for p in suite:
        prompt = target.chat_prompt(p["messages"])
        output = generate(target, prompt, draft=None, config=spec).tokens
        rows.append({"id": p["id"], "category": p["category"], "tokens": len(output),
                     "kept": copy_rounds(prompt, output, config.k)})  # fmt: skip
    return rows


def cost_curve(
    target: SteerableModel, prompt: list[int], rows: list[dict[str, Any]], repeats: int
) -> dict[int, float]:
    """Ms of the target's forward over each number of tokens a round of ``rows`` verifies."""
    sizes = sorted({1} | {n + 1 for r in rows for n in r["kept"]})
    return {n: round(forward_ms(target, prompt, n, repeats), 3) for n in sizes}


def summarize(rows: list[dict[str, Any]], curve: dict[int, float] | None = None) -> dict[str, Any]:
    """Per category and overall: output tokens over rounds (the bound with free
    verification) and, with the measured ``curve``, output tokens over the rounds' cost in
    one-token forwards (the bound on this machine)."""
    out: dict[str, Any] = {}
    for category in dict.fromkeys([r["category"] for r in rows] + ["all"]):
        mine = [r for r in rows if category in ("all", r["category"])]
        tokens, kept = sum(r["tokens"] for r in mine), [n for r in mine for n in r["kept"]]
        cheapest = _cheapest(curve, max(kept, default=0) + 1) if curve else []
        priced = sum(cheapest[n + 1] for n in kept) / curve[1] if curve else None
        out[category] = {
            "prompts": len(mine),
            "tokens": tokens,
            "rounds": len(kept),
            "bound": round(tokens / len(kept), 3) if kept else None,
            "bound_on_this_machine": round(tokens / priced, 3) if priced else None,
        }
    return out


def _cheapest(curve: dict[int, float], longest: int) -> list[float]:
    """For n = 0 … ``longest``, the least cost of forwards (sizes measured in ``curve``)
    whose tokens add up to n: on a CPU two forwards over halves can cost less than one."""
    out = [0.0] + [float("inf")] * longest
    for n in range(1, longest + 1):
        out[n] = min(out[n - m] + cost for m, cost in curve.items() if m <= n)
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Copy bound: the speedup no copying drafter passes (perfect, free verification)",
        "",
        "",
        "bound: output tokens over rounds; on this machine: over the cheapest forwards that",
        "produce each round's tokens, priced by the measured cost of a forward over n tokens",
        "against a one-token one.",
        "",
        "| category | prompts | output tokens | rounds | bound | bound on this machine |",
        "|---|---|---|---|---|---|",
    ]
    for category, s in report["summary"].items():
        lines.append(
            f"| {category} | {s['prompts']} | {s['tokens']} | {s['rounds']} | {s['bound']}x "
            f"| {s['bound_on_this_machine']}x |"
        )
    return "\n".join(lines) + "\n"


def run_copy_bound(config: CopyBoundConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    from coinfer import catalog
    from coinfer.models import load_model

    suite = _prompts(config)
    if config.target in catalog.CATALOG:
        catalog.prepare(config.target)
    log(f"loading {config.target}…")
    target = load_model(config.target, backend="llama.cpp", n_ctx=2048)
    try:
        rows = measure(target, suite, config)
        log("timing the target's forward over each round's tokens…")
        curve = (
            cost_curve(target, target.chat_prompt(suite[0]["messages"]), rows, config.repeats) if rows else {}
        )
    finally:
        target.close()
    report = {"config": vars(config), "environment": environment(), "rows": rows,
              "cost_ms": curve, "summary": summarize(rows, curve)}  # fmt: skip
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", report)
    write_markdown(out / "results.md", markdown(report))
    return report
