"""The local–remote protocols on the engine convention: ``stream`` yields each step, then
the answer with its usage; the config picks the protocol."""

from __future__ import annotations

import json

import pytest

from coinfer.chat import PriceTable
from coinfer.engines import minions as m
from coinfer.engines.minions.report import cost_table, side_usage, summary
from coinfer.errors import ConfigError
from coinfer.testing import ScriptedChat
from tests.engines.minions.test_minions import DOC, GOOD_CODE, QUESTION, final_reply, local_reader


def test_stream_yields_every_step_then_the_answer_with_its_usage() -> None:
    remote, local = ScriptedChat([GOOD_CODE, final_reply("8080")]), ScriptedChat(local_reader)
    responses = list(m.stream(QUESTION, [("config.md", DOC)], local=local, remote=remote))
    *steps, answer = responses
    assert [r.extras["event"]["event"] for r in steps] == [
        "chat",
        "code",
        "jobs",
        "chat",
        "abstentions",
        "chat",
    ]
    assert all(r.text == "" and r.finish_reason is None for r in steps)
    assert (answer.text, answer.finish_reason, answer.stats.rounds) == ("8080", "stop", 1)
    extras = answer.extras
    assert extras["protocol"] == "minions" and not extras["best_effort"]
    assert extras["usage"]["remote"]["calls"] == 2 and extras["usage"]["local"]["calls"] == 4
    assert extras["usage"]["by_round"]["remote"]["1"]["calls"] == 2
    assert [e["event"] for e in extras["trace"]] == [r.extras["event"]["event"] for r in steps]
    json.dumps(extras)  # JSON data, for --json, the server and the bench
    sides = answer.stats.as_dict()["by_side"]
    assert sides == {
        side: {**extras["usage"][side], "seconds": extras["seconds"][side]} for side in ("local", "remote")
    }
    assert (
        answer.stats.prompt_tokens == sides["local"]["prompt_tokens"] + sides["remote"]["prompt_tokens"] > 0
    )
    assert answer.tokens == [] and answer.stats.n_tokens == 0  # a chat's text: no tokens to count


def test_the_answer_says_where_its_time_went_side_by_side() -> None:
    import time

    def slow_remote(request: object) -> str:
        time.sleep(0.1)  # a remote that takes its time: the question's wait is on that side
        return replies.pop(0)

    replies = [GOOD_CODE, final_reply("8080")]
    answer = m.generate(QUESTION, [("config.md", DOC)], local=ScriptedChat(local_reader),
                        remote=ScriptedChat(slow_remote))  # fmt: skip
    seconds, trace = answer.extras["seconds"], answer.extras["trace"]
    assert seconds["remote"] >= 0.2 and seconds["sandbox"] > 0  # two remote calls, one code run
    for side in ("local", "remote"):
        calls = [e["seconds"] for e in trace if e["event"] == "chat" and e["side"] == side]
        assert seconds[side] == pytest.approx(sum(calls), abs=0.01) and calls
    assert answer.stats.by_side["remote"]["seconds"] == seconds["remote"]


def test_an_answer_over_a_local_model_carries_its_tokens(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    from coinfer.chat import LocalChat

    remote = ScriptedChat(lambda r: "The port is 8080.")
    answer = m.generate(
        QUESTION,
        [("d", DOC)],
        local=LocalChat(smollm_llama),
        remote=remote,
        config=m.DirectConfig(side="remote"),
    )
    assert answer.tokens and smollm_llama.detokenize(answer.tokens) == answer.text == "The port is 8080."
    assert answer.stats.n_tokens == len(answer.tokens) and answer.stats.tokens_per_s > 0


def test_generate_returns_the_answer_and_the_report_reads_only_it() -> None:
    remote = ScriptedChat(lambda r: "8080")
    answer = m.generate(
        QUESTION, [("d", DOC)], local=None, remote=remote, config=m.DirectConfig(side="remote")
    )
    assert answer.text == "8080" and answer.extras["protocol"] == "remote-only"
    price = PriceTable().price_of("gpt-4o")
    report = summary(answer, price=price, priced_as="gpt-4o")
    remote_usage = side_usage(answer, "remote")
    assert report["cost_usd"] == pytest.approx(price.cost(remote_usage), abs=1e-6) and remote_usage.calls == 1  # type: ignore[union-attr]
    assert "priced as gpt-4o" in cost_table(answer, price=price, priced_as="gpt-4o")


@pytest.mark.parametrize(
    ("config", "name"),
    [
        (m.MinionConfig(max_rounds=1), "minion"),
        (m.RagConfig(top_k=2), "rag"),
        (m.DirectConfig(side="local"), "local-only"),
    ],
)
def test_the_config_picks_the_protocol(config: m.ProtocolConfig, name: str) -> None:
    replies = ScriptedChat(
        lambda r: final_reply("8080") if "decision" in json.dumps(r.json_schema or {}) else "8080"
    )
    answer = m.generate(QUESTION, [("d", DOC)], local=replies, remote=replies, config=config)
    assert answer.extras["protocol"] == name and "8080" in answer.text


def test_bad_input_is_refused_before_any_model_is_asked() -> None:
    remote = ScriptedChat(lambda r: "8080")
    with pytest.raises(ConfigError, match="question is empty"):
        m.generate("  ", [("d", DOC)], local=None, remote=remote)
    with pytest.raises(ConfigError, match="no document"):
        m.generate(QUESTION, [], local=None, remote=remote)
    with pytest.raises(ConfigError):
        m.RagConfig(retriever="tfidf")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        m.DirectConfig(side="both")  # type: ignore[arg-type]
    assert remote.requests == []


def test_a_session_over_a_local_batch_and_an_api_answers_several_questions_at_once() -> None:
    from coinfer.chat import LocalChat, OpenAIChat, SharedChat
    from coinfer.decoding.registry import get
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 97, n_ctx=256)
    local, api = LocalChat(model, max_concurrent=4), OpenAIChat("cloud", base_url="http://127.0.0.1:9/v1")
    with get("minions").open({"local": local, "remote": api}) as session:
        assert isinstance(session.local, SharedChat) and session.local.local is local
        assert session.concurrent() == 4  # as many questions as the local batch holds
    assert not session.local._thread.is_alive()  # its worker stopped with the session
    with get("minions").open({"local": ScriptedChat(local_reader), "remote": api}) as session:
        assert session.concurrent() == 1  # a chat model not known to be thread-safe: one at a time
