"""``coinfer bench copy-bound``: how far copying could speed decoding up, per category.

For each prompt, the target's own greedy output, then prompt lookup (``NgramDrafter``,
with no cap on a shallow match's length) replayed over it against a perfect verifier
that costs nothing: every round keeps the draft's tokens that equal the target's, and
the target's next one. Output tokens over rounds is then the speedup that no lossless
drafter that copies earlier text can pass on that prompt, at any draft length, on a
machine where verifying k tokens costs what one does. On a CPU a wider forward costs
more, so the real ceiling is lower. A category whose bound is under a target rules out
copying as the way to reach it (issue 21's 1.3x on the quote category).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coinfer.bench.broad_suite import BROAD_CATEGORIES, broad_suite, split_suite
from coinfer.bench.collective import SPLITS
from coinfer.bench.report import environment, write_json, write_markdown
from coinfer.decoding import NgramDrafter, SamplingParams, SpecConfig, generate
from coinfer.errors import ConfigError
from coinfer.models import SteerableModel

__all__ = ["CopyBoundConfig", "copy_rounds", "run_copy_bound", "summarize"]


@dataclass(frozen=True)
class CopyBoundConfig:
    out: str
    target: str = "qwen2.5-coder-1.5b"
    categories: tuple[str, ...] = BROAD_CATEGORIES
    split: str = "all"
    per_category: int = 8
    max_tokens: int = 128
    k: int = 64  # the longest copy one round may verify

    def __post_init__(self) -> None:
        unknown = sorted(set(self.categories) - set(BROAD_CATEGORIES))
        if unknown:
            hint = f"choose from {', '.join(BROAD_CATEGORIES)}"
            raise ConfigError(f"unknown category {unknown[0]!r}", hint=hint)
        if self.split not in SPLITS:
            raise ConfigError(f"unknown split {self.split!r}", hint=f"splits: {', '.join(SPLITS)}")
        if self.per_category < 1 or self.max_tokens < 1 or self.k < 1:
            raise ConfigError("per_category, max_tokens and k must be at least 1")


def copy_rounds(prompt: Sequence[int], output: Sequence[int], k: int = 64) -> int:
    """Rounds a perfect, free verifier needs to produce ``output`` after ``prompt`` with
    prompt lookup drafting up to ``k`` tokens: each round keeps the draft's prefix that
    equals the output and one token more (the target's own)."""
    drafter = NgramDrafter(shallow_tokens=k)
    context, done, rounds = list(prompt), 0, 0
    while done < len(output):
        draft = drafter.propose_many([(0, context)], k)[0].tokens
        held = 0
        while held < len(draft) and done + held < len(output) and draft[held] == output[done + held]:
            held += 1
        step = list(output[done : done + held + 1])
        drafter.feedback(0, context, step)
        context += step
        done += len(step)
        rounds += 1
    return rounds


def _prompts(config: CopyBoundConfig) -> list[dict[str, Any]]:
    suite = split_suite(broad_suite(config.per_category), config.split)
    return [p for p in suite if p["category"] in config.categories]


def measure(
    target: SteerableModel, suite: list[dict[str, Any]], config: CopyBoundConfig
) -> list[dict[str, Any]]:
    """Per prompt: its category, the target's greedy output length and the rounds of the
    perfect copy verifier."""
    rows = []
    spec = SpecConfig(max_tokens=config.max_tokens, sampling=SamplingParams())
    for p in suite:
        prompt = target.chat_prompt(p["messages"])
        output = generate(target, prompt, draft=None, config=spec).tokens
        rows.append({"id": p["id"], "category": p["category"], "tokens": len(output),
                     "rounds": copy_rounds(prompt, output, config.k)})  # fmt: skip
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Output tokens over rounds per category and overall (the bound on the speedup)."""
    out: dict[str, Any] = {}
    for category in dict.fromkeys([r["category"] for r in rows] + ["all"]):
        mine = [r for r in rows if category in ("all", r["category"])]
        rounds = sum(r["rounds"] for r in mine)
        out[category] = {
            "prompts": len(mine),
            "tokens": sum(r["tokens"] for r in mine),
            "rounds": rounds,
            "bound": round(sum(r["tokens"] for r in mine) / rounds, 3) if rounds else None,
        }
    return out


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Copy bound: the speedup no copying drafter passes (perfect, free verification)",
        "",
        "| category | prompts | output tokens | rounds | bound |",
        "|---|---|---|---|---|",
    ]
    for category, s in report["summary"].items():
        lines.append(f"| {category} | {s['prompts']} | {s['tokens']} | {s['rounds']} | {s['bound']}x |")
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
    finally:
        target.close()
    report = {"config": vars(config), "environment": environment(), "rows": rows, "summary": summarize(rows)}
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "results.json", report)
    write_markdown(out / "results.md", markdown(report))
    return report
