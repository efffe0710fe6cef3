"""The engines bench: each served engine at 1 and more clients, its throughput and its
ratio to one client's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coinfer.bench.serve_engines import EnginesConfig, markdown_table, run_engines
from coinfer.errors import ConfigError
from tests.conftest import needs_llama


def test_an_unknown_engine_or_level_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown engines"):
        EnginesConfig(engines=("warp",))
    with pytest.raises(ConfigError, match=">= 1"):
        EnginesConfig(levels=(0, 4))


def test_where_a_questions_time_went_is_averaged_and_tabled() -> None:
    from coinfer.bench.serve_engines import level_row
    from coinfer.bench.serve_load import Stream

    streams = [
        Stream(0, tokens=5, last_s=10.0, seconds={"local": 6.0, "remote": 3.0, "sandbox": 0.5}),
        Stream(1, tokens=5, last_s=20.0, seconds={"local": 10.0, "remote": 7.0, "sandbox": 1.5}),
        Stream(2, error="APIConnectionError: gone"),  # an unanswered question counts nowhere
    ]
    row = level_row(2, streams, wall_s=20.0)
    assert row["seconds_per_request"] == {"local": 8.0, "remote": 5.0, "sandbox": 1.0}
    assert row["latency_s"] == 15.0 and row["answered"] == 2
    report = {"config": {"levels": [2]}, "engines": [{"engine": "minions", "model": "m", "unit": "per_min",
                                                      "rows": [row], "scaling": {2: 1.0}}]}  # fmt: skip
    lines = markdown_table(report).splitlines()
    assert lines[-3] == "| engine | clients | s from sent to answered | local s | remote s | sandbox s |"
    assert lines[-1] == "| minions | 2 | 15.0 | 8.0 | 5.0 | 1.0 |"
    said_nothing = level_row(1, [Stream(0, tokens=3, last_s=1.0)], 1.0)  # an engine that does not say
    assert said_nothing["seconds_per_request"] is None


def test_the_seconds_a_served_answer_gives_are_read_from_its_last_chunk() -> None:
    from openai.types.chat import ChatCompletionChunk

    from coinfer.bench.serve_load import seconds_said

    head = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    end = {"index": 0, "delta": {}, "finish_reason": "stop"}
    record = {
        "engine": "minions",
        "stats": {},
        "extras": {"seconds": {"local": 2.5, "remote": 1, "sandbox": 0.2}},
    }
    last = ChatCompletionChunk.model_validate({**head, "choices": [end], "coinfer": record})
    assert seconds_said(last) == {"local": 2.5, "remote": 1.0, "sandbox": 0.2}
    plain = ChatCompletionChunk.model_validate({**head, "choices": [end], "coinfer": {"extras": {}}})
    assert (
        seconds_said(plain) == {} == seconds_said(ChatCompletionChunk.model_validate({**head, "choices": []}))
    )


@needs_llama
def test_plain_and_dragon_serving_at_one_and_two_clients_answer_every_request(smollm_path: Path) -> None:
    config = EnginesConfig(
        model="smollm2-135m", engines=("plain", "dragon"), levels=(1, 2), requests=2, max_tokens=8
    )
    report = run_engines(config, log=lambda _: None)
    plain, dragon = report["engines"]
    assert dragon["unit"] == "tok_s" and dragon["flags"][:2] == ["--engine", "dragon"]
    for row in dragon["rows"]:  # every DRAGON bench question, answered from the device's corpus
        assert row["answered"] == row["requests"] == 6 and not row["errors"]
    assert plain["unit"] == "tok_s" and [r["clients"] for r in plain["rows"]] == [1, 2]
    for row in plain["rows"]:
        assert row["answered"] == row["requests"] == 2 and not row["errors"] and row["tok_s"] > 0
    assert plain["scaling"][1] == 1.0 and plain["scaling"][2] == round(
        plain["rows"][1]["tok_s"] / plain["rows"][0]["tok_s"], 3
    )
    table = markdown_table(report)
    assert table.splitlines()[0] == "| engine | model | unit | 1 clients | 2 clients | 2 / 1 | errors |"
    assert "| plain | smollm2-135m | tok/s |" in table


@needs_llama
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_minions_remote_is_served_on_a_core_of_its_own_and_the_engine_on_the_other(smollm_path: Path) -> None:
    import contextlib

    import psutil

    from coinfer.bench.serve_engines import engine_servers

    config = EnginesConfig(model="smollm2-135m", local="smollm2-135m", max_batch=2, ctx=1024)
    near, far = sorted(os.sched_getaffinity(0))[:2]
    with contextlib.ExitStack() as stack:
        flags = ["--engine", "minions", "--remote", "smollm2-135m"]
        url = engine_servers(stack, "smollm2-135m", flags, config)
        servers = {tuple(p.cpu_affinity()): p.cmdline() for p in psutil.Process().children()}
        assert set(servers) == {(near,), (far,)}  # two servers, a core each
        engine, remote = servers[(near,)], servers[(far,)]
        assert "minions" in engine and "--engine" not in remote
        assert engine[engine.index("--remote-base-url") + 1].startswith("http://127.0.0.1:")
        assert engine[engine.index("--threads") + 1] == remote[remote.index("--threads") + 1] == "1"
        assert url.startswith("http://127.0.0.1:") and url != engine[engine.index("--remote-base-url") + 1]
    assert psutil.Process().children() == []  # both stopped
    with contextlib.ExitStack() as stack:  # an engine without a remote: one server, on every core
        engine_servers(stack, "smollm2-135m", ["--engine", "plain"], config)
        (alone,) = psutil.Process().children()
        assert len(alone.cpu_affinity()) == len(os.sched_getaffinity(0))
        assert "--threads" not in alone.cmdline()
