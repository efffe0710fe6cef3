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
    row = level_row(4, [(streams, 10.0)], reference)
    assert (row["requests"], row["tokens"], row["tok_s"]) == (4, 13, 1.3)
    assert row["ttft_p50_s"] == 2.0 and row["itl_p50_s"] == 0.5  # of the three that finished
    assert row["errors"] == ["prompt 0: APIConnectionError"] and row["identical"] == 2
    assert row["tuned"] == {"requests": 2, "ttft_p50_s": 1.5, "itl_p50_s": 0.5, "identical": 1}
    assert row["held_out"] == {"requests": 1, "ttft_p50_s": 4.0, "itl_p50_s": 1.0, "identical": 1}
    table = markdown_table({"systems": {"coinfer-plain": [row]}})
    assert "| coinfer-plain | 4 | 1.30 | 2.00 s /" in table and "| 1 | 0 | 2/4 | 4.00 s, 1/1 |" in table
    # a reference that failed alone is said, not only counted as a text that differs
    failed = {"coinfer-plain": ["prompt 2: APITimeoutError"], "llama-server-plain": []}
    table = markdown_table({"systems": {"coinfer-plain": [row]}, "reference_errors": failed})
    assert "coinfer-plain's alone run (each prompt's reference text) failed 1 time(s)" in table
    assert "prompt 2: APITimeoutError" in table and "llama-server-plain's" not in table
    assert "without answering" not in table


def test_requests_sent_again_after_a_connection_closed_unanswered_are_counted_and_said() -> None:
    streams = [_stream(0, "a", 1.0, 3.0, 5), _stream(1, "b", 2.0, 3.0, 3)]
    streams[1].resent = 2
    row = level_row(1, [(streams, 10.0)], {0: "a", 1: "b"})
    assert row["resent"] == 2 and row["errors"] == [] and row["identical"] == 2
    table = markdown_table({"systems": {"llama-server-ngram-mod": [row]}})
    assert "llama-server-ngram-mod closed 2 connection(s) without answering" in table
    # a run without the 1-client level still says what its alone run (the reference texts) sent again
    at_16 = {**row, "clients": 16, "resent": 1}
    table = markdown_table(
        {"systems": {"llama-server-ngram-mod": [at_16]}, "reference_resent": {"llama-server-ngram-mod": 3}}
    )
    assert "llama-server-ngram-mod closed 4 connection(s) without answering" in table


def test_repeated_runs_give_the_median_runs_throughput_and_pool_their_latencies() -> None:
    reference = {0: "a", 1: "b"}
    fast = [_stream(0, "a", 1.0, 2.0, 10), _stream(1, "b", 2.0, 3.0, 10)]  # 20 tokens
    slow = [_stream(0, "a", 3.0, 5.0, 10), _stream(1, "x", 5.0, 7.0, 10)]
    middle = [_stream(0, "a", 2.0, 3.0, 10), _stream(1, "b", 4.0, 5.0, 10)]
    row = level_row(16, [(fast, 4.0), (slow, 20.0), (middle, 5.0)], reference)
    assert row["runs"] == 3 and row["tok_s_runs"] == [5.0, 1.0, 4.0] and row["tok_s"] == 4.0
    assert row["ttft_p50_s_runs"] == [1.5, 4.0, 3.0] and row["ttft_p50_s"] == 2.5  # all six pooled
    assert (row["requests"], row["identical"], row["wall_s"]) == (6, 5, 29.0)
    assert row["timelines"][1] == [[0, None, 3.0, 5.0, 10], [1, None, 5.0, 7.0, 10]]
    table = markdown_table({"systems": {"coinfer-speculative": [row]}})
    assert "| coinfer-speculative | 16 | 4.00 (5.00, 1.00, 4.00) | 2.50 s /" in table


def test_a_level_sends_each_prompt_once_where_the_suite_has_enough() -> None:
    from coinfer.bench.serve_concurrency import level_requests

    assert [level_requests(c, 33) for c in (4, 16, 32)] == [12, 16, 32]  # no repeats
    assert level_requests(32, 9) == 32 and level_requests(4, 3) == 4  # a small suite repeats


def test_unknown_systems_and_bad_levels_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown systems"):
        ConcurrencyConfig(systems=("vllm",))
    with pytest.raises(ConfigError):
        ConcurrencyConfig(levels=(0, 4))
    with pytest.raises(ConfigError):
        ConcurrencyConfig(repeats=0)
    with pytest.raises(ConfigError, match="temperature"):
        ConcurrencyConfig(temperature=-0.5)


def test_a_sampled_level_has_llama_server_draw_from_the_whole_distribution_as_coinfer_does() -> None:
    from coinfer.bench.serve_concurrency import system_flags

    # greedy: each server as its users start it
    assert system_flags("llama-server-ngram-mod", 0.0) == ("llama-server", ["--spec-type", "ngram-mod"])
    # sampled: llama-server's top-k 40, top-p 0.95 and min-p 0.05 off, so a temperature
    # means the same distribution on both servers
    kind, flags = system_flags("llama-server-ngram-mod", 0.7)
    assert kind == "llama-server" and flags[:2] == ["--spec-type", "ngram-mod"]
    cuts = dict(zip(flags[2::2], flags[3::2], strict=True))
    assert cuts == {"--top-k": "0", "--top-p": "1.0", "--min-p": "0.0"}
    assert system_flags("coinfer-speculative", 0.7) == system_flags("coinfer-speculative", 0.0)


def test_the_systems_take_turns_going_first_round_by_round() -> None:
    from coinfer.bench.serve_concurrency import run_order

    order = [f"{name}@{clients}" for _, clients, name in run_order(["plain", "spec"], (1, 4), 3)]
    assert order == [
        "plain@1", "spec@1", "plain@4", "spec@4",
        "spec@1", "plain@1", "spec@4", "plain@4",
        "plain@1", "spec@1", "plain@4", "spec@4",
    ]  # fmt: skip


@needs_llama
def test_a_server_alone_at_two_levels_twice_answers_every_request_as_alone(smollm_path: Path) -> None:
    """One system (a server start per run is most of this test's time; the order of
    several is ``run_order``'s, above): the speculative engine, batched."""
    from coinfer.bench.serve_concurrency import run_concurrency

    config = ConcurrencyConfig(
        model="smollm2-135m", levels=(1, 4), max_tokens=8, per_category=1, ctx=1024,
        systems=("coinfer-speculative",), repeats=2,
    )  # fmt: skip
    lines: list[str] = []
    report = run_concurrency(config, log=lines.append)
    one, four = report["systems"]["coinfer-speculative"]
    assert (one["clients"], one["requests"], four["clients"], four["requests"]) == (1, 6, 4, 8)
    for row in (one, four):
        assert row["errors"] == [] and 0 < row["tokens"] <= 8 * row["requests"] and row["tok_s"] > 0
        assert row["runs"] == 2 and len(row["tok_s_runs"]) == 2 and row["tok_s"] > 0
        assert row["tuned"]["requests"] + row["held_out"]["requests"] == row["requests"]
    assert one["identical"] == 6  # the second run alone gives the first's texts
    for run in four["timelines"]:  # when each was sent, and its first and last token, in the run
        assert all(0 <= sent < first <= last and tokens > 0 for _, sent, first, last, tokens in run)
    # batched, llama.cpp's logits move slightly with the batch's shape (the README's known
    # gap): a near-tie may flip one greedy text, and the bench counts it
    assert four["identical"] >= 6
    # the alone run first (the 1-client level's first run), then the rest of the rounds
    order = [line.split()[0] + f"@{line.split()[1]}" for line in lines]
    assert order == ["coinfer-speculative@1", "coinfer-speculative@4", "coinfer-speculative@1",
                     "coinfer-speculative@4"]  # fmt: skip
    assert [p["held_out"] for p in report["prompts"]] == [False, False, False]


@needs_llama
def test_sampled_requests_in_a_speculative_batch_sample_what_they_sample_alone(smollm_path: Path) -> None:
    """At a temperature, each request seeded by its prompt: in the speculative engine's
    batch (whose drafts sampled requests verify too: ``chat.drafting``) each text is the
    one the same request samples alone, bar the batch shape's near-ties (the README's
    known gap). At 0.3: at 0.8 a near-tie a batch's rounding flips is so common in
    SmolLM2's 24 tokens that only 1 or 2 of these 4 texts were identical in five runs (3
    in seven runs at 0.3). That each seed gives its own text exactly is
    ``tests/decoding/test_batch_speculation.py``'s (a scripted model, no rounding)."""
    from coinfer.bench.serve_concurrency import run_concurrency

    config = ConcurrencyConfig(
        model="smollm2-135m", levels=(1, 4), max_tokens=24, per_category=1, ctx=1024,
        systems=("coinfer-speculative",), temperature=0.3,
    )  # fmt: skip
    one, four = run_concurrency(config, log=lambda _: None)["systems"]["coinfer-speculative"]
    assert one["errors"] == four["errors"] == [] and four["requests"] == 4
    assert one["identical"] == 3 and four["identical"] >= 2  # the 3 prompts, then the first again
    assert sorted(s[0] for s in four["timelines"][0]) == [0, 0, 1, 2]


def test_a_shared_opening_is_one_system_message_of_about_the_tokens_asked() -> None:
    from coinfer.bench.serve_concurrency import shared_opening

    assert shared_opening(0) == []
    (message,) = shared_opening(500)
    assert message["role"] == "system" and 2000 < len(message["content"]) < 2100
    assert shared_opening(500) == [message]  # the same for every request and every run
    with pytest.raises(ConfigError, match="at most"):
        shared_opening(10**6)


def test_a_prompts_file_replaces_the_suite_and_a_bad_one_says_which_line(tmp_path: Path) -> None:
    import json

    from coinfer.bench.serve_concurrency import suite_of

    mine = [{"id": f"q{i}", "category": "chat", "messages": [{"role": "user", "content": f"q {i}"}]}
            for i in range(5)]  # fmt: skip
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(p) for p in mine) + "\n")
    assert suite_of(ConcurrencyConfig(prompts=str(path), per_category=2)) == mine
    assert len(suite_of(ConcurrencyConfig(per_category=2))) == 6  # the suite's three kinds
    path.write_text(json.dumps(mine[0]) + "\n{not json\n")
    with pytest.raises(ConfigError, match=":2 is not JSON"):
        suite_of(ConcurrencyConfig(prompts=str(path)))
