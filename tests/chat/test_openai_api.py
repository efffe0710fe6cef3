"""The OpenAI-compatible client against a real HTTP server on loopback."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from coinfer.chat import ChatRequest, OpenAIChat
from coinfer.errors import ConfigError, ModelError, TransportError
from coinfer.serve import ChatServer
from coinfer.testing import ScriptedChat

pytest.importorskip("openai")


def _ask(text: str, **kwargs: object) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def echo() -> Iterator[tuple[ScriptedChat, ChatServer]]:
    model = ScriptedChat(lambda r: "you said " + r.messages[-1]["content"], name="echo-1")
    with ChatServer(model) as server:
        yield model, server


def test_a_round_trip_returns_texts_reasons_and_the_servers_usage(
    echo: tuple[ScriptedChat, ChatServer],
) -> None:
    _, server = echo
    client = OpenAIChat("echo-1", base_url=server.url)
    result = client.chat(_ask("two words", n=3))
    assert result.texts == ["you said two words"] * 3
    assert result.finish_reasons == ["stop"] * 3
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.calls) == (2, 12, 1)
    assert not result.usage.estimated


def test_a_batch_is_sent_concurrently_and_the_server_batches_it() -> None:
    def slow(r: ChatRequest) -> str:
        time.sleep(0.3)
        return r.messages[-1]["content"].upper()

    model = ScriptedChat(slow)
    with ChatServer(model) as server:
        results = OpenAIChat("scripted", base_url=server.url).chat_batch([_ask(f"q{i}") for i in range(6)])
    assert [r.text for r in results] == [f"Q{i}" for i in range(6)]
    assert max(model.batches) > 1  # requests that arrived together were answered together


def test_a_server_that_is_down_is_a_transport_error_after_bounded_retries() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = OpenAIChat("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, timeout_s=5)
    started = time.monotonic()
    with pytest.raises(
        TransportError, match=f"could not reach the remote model m at http://127.0.0.1:{port}"
    ):
        client.chat(_ask("hello"))
    assert time.monotonic() - started < 30


def test_a_failing_model_is_an_http_error_with_its_message() -> None:
    def broken(r: ChatRequest) -> str:
        raise ModelError("the model fell over")

    with ChatServer(ScriptedChat(broken)) as server:
        client = OpenAIChat("scripted", base_url=server.url, max_retries=0)
        with pytest.raises(TransportError, match="HTTP 500.*fell over"):
            client.chat(_ask("hello"))


def test_the_openai_api_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="no API key"):
        OpenAIChat("gpt-4o")
