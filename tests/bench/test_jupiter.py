"""The Jupiter bench's summary: ratios over the prompts of 512 tokens or more only, and a
changed output is caught."""

from __future__ import annotations

from typing import Any


def _rows(ttfts: list[float], texts: list[str] | None = None) -> list[dict[str, Any]]:
    lengths, sources = [128, 600, 1000, 700], ["docs", "docs", "suite", "suite"]
    texts = texts or ["a", "b", "c", "d"]
    return [{"prompt_tokens": n, "source": s, "ttft_s": t, "text": x, "decode_ms_per_token": 100.0}
            for n, s, t, x in zip(lengths, sources, ttfts, texts, strict=True)]  # fmt: skip


def test_speedups_are_geometric_means_over_long_prompts_and_a_changed_text_is_caught() -> None:
    from coinfer.bench.jupiter import summarize

    equal = {
        "systems": {
            "single": _rows([1.0, 4.0, 9.0, 4.0]),
            "plain-memory": _rows([1.0, 4.0, 8.0, 4.0]),
            "plain-jupiter": _rows([1.0, 4.0, 8.0, 4.0]),
            "jupiter": _rows([9.0, 2.0, 4.0, 2.0]),  # the short prompt does not count
        },
        "planner_gap": [0.0, 0.01],
    }
    links = {"100mbit": {"link": {"bytes_per_s": 12.5e6}, "systems": {
        "plain-jupiter": _rows([1.0, 3.0, 3.0, 3.0]), "jupiter": _rows([1.0, 2.0, 2.0, 2.0])}}}  # fmt: skip
    s = summarize(equal, None, links, None)
    assert s["prefill_speedup_vs_plain"] == round((2 * 2 * 2) ** (1 / 3), 3)
    assert s["prefill_speedup_vs_single"] == round((2 * 2.25 * 2) ** (1 / 3), 3)
    assert s["by_source"]["docs"]["vs_single"] == 2.0
    assert s["planner_gap_vs_exhaustive"] == 0.01 and s["outputs_identical"] is True
    assert s["links"]["100mbit"] == {"prefill_speedup_vs_plain": 1.5, "link_mbit_measured": 100.0}
    equal["systems"]["jupiter"] = _rows([9.0, 2.0, 4.0, 2.0], ["a", "b", "C", "d"])
    assert summarize(equal, None, None, None)["outputs_identical"] is False
