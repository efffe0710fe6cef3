"""The concurrency bench: each server alone at several client counts, timed by the official
client, with every text compared to the same request served alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinfer.bench.serve_concurrency import ConcurrencyConfig, level_row, markdown_table
from coinfer.bench.serve_load import Stream
from coinfer.errors import ConfigError
from tests.conftest import needs_llama


def _stream(
    prompt: int, text: str, first: float, last: float, tokens: int, error: str | None = None
) -> Stream:
    return Stream(prompt, text=text, first_s=first, last_s=last, tokens=tokens, error=error, finish="length")


def test_a_level_counts_throughput_latencies_and_identical_texts_for_both_halves() -> None:
    reference = {0: "a", 1: "b", 3: "d"}
    streams = [
        _stream(0, "a", 1.0, 3.0, 5),  # 0.5 s per token after the first
        _stream(1, "x", 2.0, 3.0, 3),  # a text that differs from the request alone
        _stream(3, "d", 4.0, 8.0, 5),  # held out (every fourth prompt)
        _stream(0, "", 0.0, 0.0, 0, error="APIConnectionError"),
    ]
    row = level_row(4, streams, 10.0, reference)
    assert (row["requests"], row["tokens"], row["tok_s"]) == (4, 13, 1.3)
    assert row["ttft_p50_s"] == 2.0 and row["itl_p50_s"] == 0.5  # of the three that finished
    assert row["errors"] == ["prompt 0: APIConnectionError"] and row["identical"] == 2
    assert row["tuned"] == {"requests": 2, "ttft_p50_s": 1.5, "itl_p50_s": 0.5, "identical": 1}
    assert row["held_out"] == {"requests": 1, "ttft_p50_s": 4.0, "itl_p50_s": 1.0, "identical": 1}
    table = markdown_table({"systems": {"coinfer-plain": [row]}})
    assert "| coinfer-plain | 4 | 1.30 | 2.00 s /" in table and "| 1 | 0 | 2/4 | 4.00 s, 1/1 |" in table


def test_a_level_sends_each_prompt_once_where_the_suite_has_enough() -> None:
    from coinfer.bench.serve_concurrency import level_requests

    assert [level_requests(c, 33) for c in (4, 16, 32)] == [12, 16, 32]  # no repeats
    assert level_requests(32, 9) == 32 and level_requests(4, 3) == 4  # a small suite repeats


def test_unknown_systems_and_bad_levels_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown systems"):
        ConcurrencyConfig(systems=("vllm",))
    with pytest.raises(ConfigError):
        ConcurrencyConfig(levels=(0, 4))


@needs_llama
def test_each_server_alone_at_two_levels_answers_every_request_as_alone(smollm_path: Path) -> None:
    from coinfer.bench.serve_concurrency import run_concurrency

    config = ConcurrencyConfig(
        model="smollm2-135m", levels=(1, 4), max_tokens=8, per_category=1, ctx=1024,
        systems=("coinfer-plain", "coinfer-speculative"),
    )  # fmt: skip
    report = run_concurrency(config, log=lambda line: None)
    for name in config.systems:  # the speculative engine batched as plain decoding is
        one, four = report["systems"][name]
        assert (one["clients"], one["requests"], four["clients"], four["requests"]) == (1, 3, 4, 4)
        for row in (one, four):
            assert row["errors"] == [] and 0 < row["tokens"] <= 8 * row["requests"] and row["tok_s"] > 0
            assert row["tuned"]["requests"] + row["held_out"]["requests"] == row["requests"]
        assert one["identical"] == 3
        # batched, llama.cpp's logits move slightly with the batch's shape (the README's known
        # gap): a near-tie may flip one greedy text, and the bench counts it
        assert four["identical"] >= 3
    assert [p["held_out"] for p in report["prompts"]] == [False, False, False]


def test_a_shared_opening_is_one_system_message_of_about_the_tokens_asked() -> None:
    from coinfer.bench.serve_concurrency import shared_opening

    assert shared_opening(0) == []
    (message,) = shared_opening(500)
    assert message["role"] == "system" and 2000 < len(message["content"]) < 2100
    assert shared_opening(500) == [message]  # the same for every request and every run
    with pytest.raises(ConfigError, match="at most"):
        shared_opening(10**6)
