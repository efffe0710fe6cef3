"""The chat part of ``coinfer bench serve``: multi-turn chats with think time, and how much
of each later turn's prompt a server took from a cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinfer.bench.serve_chat import Chat, ChatConfig, markdown_table, system_row
from coinfer.bench.serve_load import Stream
from coinfer.errors import ConfigError
from tests.conftest import needs_llama

pytest.importorskip("openai")


def _chat(opening: int, ttfts: list[float], cached: list[int]) -> Chat:
    turns = [
        Stream(opening, f"t{i}", first_s=t, tokens=10, prompt_tokens=100, cached_tokens=c)
        for i, (t, c) in enumerate(zip(ttfts, cached, strict=True))
    ]
    return Chat(opening, turns)


def test_a_run_counts_turn_one_apart_and_the_held_out_chats_apart() -> None:
    chats = [
        _chat(0, [4.0, 1.0, 2.0], [0, 90, 95]),
        _chat(1, [5.0, 3.0, 1.0], [0, 90, 95]),
        _chat(3, [6.0, 9.0, 7.0], [0, 0, 0]),  # every fourth opening is held out
    ]
    row = system_row([(chats, 10.0), (chats, 20.0)])
    assert row["tok_s_runs"] == [9.0, 4.5] and row["tok_s"] == 6.75  # 90 tokens a run
    first = row["runs"][0]
    assert first["ttft_turn1_p50_s"] == 5.0 and first["ttft_later_p50_s"] == 2.5
    assert first["ttft_later_tuned_p50_s"] == 1.5 and first["ttft_later_held_out_p50_s"] == 8.0
    assert (first["later_prompt_tokens"], first["later_cached_tokens"]) == (600, 370)
    table = markdown_table({"systems": {"s": row}})
    assert "| s | 1 | 9.00 | 5.00 s | 2.50 s | 8.00 s | 370/600 (62%) | 0 |" in table


def test_a_chat_needs_two_turns_and_known_systems() -> None:
    with pytest.raises(ConfigError, match="2 or more turns"):
        ChatConfig(turns=1)
    with pytest.raises(ConfigError, match="unknown systems"):
        ChatConfig(systems=("vllm",))
    with pytest.raises(ConfigError):
        ChatConfig(think_s=-1)


@needs_llama
def test_a_returning_chat_is_read_from_the_store_not_again(smollm_path: Path) -> None:
    """Four chats through one slot: each client's next turn finds its cache gone from the
    slot (the others took it while it thought), and coinfer takes it back from host
    memory; without the store (``--cache-ram 0``) it reads the history again."""
    from coinfer.bench.serve_chat import run_chat

    config = ChatConfig(
        model="smollm2-135m", clients=4, turns=2, think_s=0.5, max_tokens=8, slots=1, ctx=1024,
        per_category=1, systems=("coinfer-speculative", "coinfer-speculative-nostore"),
    )  # fmt: skip
    report = run_chat(config, log=lambda line: None)
    stored, nostore = (report["systems"][n]["runs"][0] for n in config.systems)
    for run in (stored, nostore):
        assert run["errors"] == [] and run["tok_s"] > 0 and len(run["texts"]) == 4
        assert all(len(turns) == 2 and all(turns) for turns in run["texts"])
    with_store, without = (r["later_cached_tokens"] / r["later_prompt_tokens"] for r in (stored, nostore))
    assert with_store > 0.8  # all but the new turns, from the store
    assert without < with_store  # without it, what two kept slots held
    assert [o["held_out"] for o in report["openings"]] == [False, False, False, True]
