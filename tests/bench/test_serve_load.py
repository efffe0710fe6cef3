"""The load test: 64 concurrent streaming clients of the official client against ``coinfer
serve`` on SmolLM2, a third of which go away mid-stream, a bounded number of requests and
time. (It holds every check the 32-client storm of ``coinfer bench serve --part load``
makes: honest 429s only, every finished stream identical to the request alone, memory
back within 10%; that storm is not run again here.) Each prompt is its function's first
lines: the test's time was most of it reading prompts, twice (the storm, then alone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import needs_llama

pytest.importorskip("openai")


@needs_llama
def test_64_clients_a_third_of_which_leave_mid_stream_lose_nothing(smollm_path: Path) -> None:
    from coinfer.bench.serve_load import LoadConfig, leaving, run_load

    config = LoadConfig(
        clients=64, requests=64, max_tokens=24, max_queue=40, deadline_s=600, disconnect=1 / 3,
        prompt_chars=160,
    )  # fmt: skip
    assert len(leaving(config)) == 21
    result = run_load(config)
    assert result.errors == []  # only honest 429s, and the clients came back
    assert result.rate_limited > 0 and result.left == 21
    assert result.complete == 64 - 21 and result.different == []  # every finished stream as alone
    assert result.live_end == result.live_start  # every left request's cache freed
    assert result.rss_end_mb <= 1.10 * result.rss_start_mb and result.passed


def test_prompts_cut_short_are_each_functions_first_whole_lines() -> None:
    from coinfer.bench.serve_load import load_prompts

    whole, cut = load_prompts(64), load_prompts(64, 160)
    assert len(set(cut)) == 64  # still one request per function
    for w, c in zip(whole, cut, strict=True):
        body = c.removesuffix("```")
        assert w.startswith(body) and body.endswith("\n") and len(c) <= len(w)
