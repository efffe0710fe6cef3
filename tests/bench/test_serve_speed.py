"""The serving speed bench's summary: per-prompt ratios to coinfer's plain serving."""

from __future__ import annotations

import pytest

from coinfer.bench.serve_speed import SpeedConfig, summarize
from coinfer.errors import ConfigError


def _run(tok_s: float, text: str = "same") -> dict[str, object]:
    return {"decode_tok_s": tok_s, "tokens": 10, "text": text}


def test_the_summary_is_the_geometric_mean_and_minimum_of_per_prompt_ratios() -> None:
    rows = [
        {"id": "a", "category": "edit", "coinfer-plain": _run(10), "coinfer-speculative": _run(20)},
        {
            "id": "b",
            "category": "grounded",
            "coinfer-plain": _run(10),
            "coinfer-speculative": _run(5, "other"),
        },
    ]
    s = summarize(rows)
    assert s["coinfer-plain"] == {
        "geomean_vs_plain": 1.0,
        "min_vs_plain": 1.0,
        "identical_to_plain": 2,
        "prompts": 2,
    }
    assert s["coinfer-speculative"]["geomean_vs_plain"] == 1.0  # sqrt(2 * 0.5)
    assert (
        s["coinfer-speculative"]["min_vs_plain"] == 0.5
        and s["coinfer-speculative"]["identical_to_plain"] == 1
    )


def test_unknown_peers_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown peers"):
        SpeedConfig(peers=("vllm",))
