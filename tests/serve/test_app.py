"""The HTTP API with the official ``openai`` client (sync, async, streaming) and plain
HTTP, over a scripted chat model: routes, the ``coinfer`` field, the key, the queue's
429, the body cap, health and metrics."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from coinfer.chat.base import ChatRequest
from coinfer.serve import ChatServer
from coinfer.testing import ScriptedChat

openai = pytest.importorskip("openai")


def _reply(r: ChatRequest) -> str:
    return "you said " + str(r.messages[-1]["content"])


def _http(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    req = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=20) as resp:
            raw = resp.read()
            return resp.status, resp.headers, raw if url.endswith("metrics") else json.loads(raw)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, json.loads(exc.read())


def test_the_official_client_gets_answers_streams_and_the_coinfer_field() -> None:
    with ChatServer(ScriptedChat(_reply, name="m1")) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused")
        msgs = [{"role": "user", "content": "hello there"}]
        r = client.chat.completions.create(model="m1", messages=msgs, n=2)
        assert [c.message.content for c in r.choices] == ["you said hello there"] * 2
        assert r.usage.completion_tokens == 8 and r.model_extra["coinfer"]["engine"] == "chat"
        chunks = list(client.chat.completions.create(
            model="m1", messages=msgs, stream=True, stream_options={"include_usage": True}, stop=[" there"]
        ))  # fmt: skip
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "you said hello"  # cut before the stop string
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
        assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0

        async def twice() -> list[str]:
            aclient = openai.AsyncOpenAI(base_url=server.url, api_key="unused")
            rs = await asyncio.gather(*[
                aclient.chat.completions.create(model="m1", messages=[{"role": "user", "content": w}])
                for w in ("a", "b")
            ])  # fmt: skip
            await aclient.close()
            return [x.choices[0].message.content for x in rs]

        assert asyncio.run(twice()) == ["you said a", "you said b"]
        assert [m.id for m in client.models.list()] == ["m1"]
        assert client.models.retrieve("m1").id == "m1"
        with pytest.raises(openai.NotFoundError, match="no served model 'm2'"):
            client.with_options(max_retries=0).models.retrieve("m2")


def test_errors_are_openais_objects_with_the_right_status() -> None:
    with ChatServer(ScriptedChat(_reply, name="m1")) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
        with pytest.raises(openai.BadRequestError, match="temperature"):
            client.chat.completions.create(
                model="m1", messages=[{"role": "user", "content": "x"}], temperature=9
            )
        with pytest.raises(openai.BadRequestError, match="chat completions only") as refused:
            client.completions.create(model="m1", prompt="x")
        # the message and its hint, once, on one line
        assert refused.value.body["message"] == "m1 serves chat completions only (POST /v1/chat/completions)"
        status, _, body = _http(server.url + "/chat/completions", b"{not json")
        assert status == 400 and body["error"]["type"] == "invalid_request_error"
        status, _, body = _http(server.url + "/chat/completions", b"[" * 100_000 + b"]" * 100_000)
        assert status == 400 and "nests too deeply" in body["error"]["message"]  # not a 500
        assert _http(server.url + "/nowhere")[0] == 404


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def _weather_or_text(r: ChatRequest) -> str:
    """A model that calls for the weather in the city asked about ("hi": no call)."""
    asked = str(r.messages[-1]["content"])
    if r.tools is None or asked == "hi":
        return "hello"
    call = {"name": "get_weather", "arguments": {"city": asked}}
    return f"Checking.<tool_call>{json.dumps(call)}</tool_call>"


def _calls(calls: Any) -> list[tuple[str, Any]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in calls or []]


def _ask_weather(client: Any, model: str, ask: str, **kwargs: Any) -> Any:
    messages = [{"role": "user", "content": ask}]
    return client.chat.completions.create(model=model, messages=messages, tools=[WEATHER], **kwargs)


def test_a_served_chat_models_tools_and_calls_go_through_whole_and_streamed() -> None:
    """A chat model served as it is (an API, a local chat) is given the request's tools,
    and the calls it returns reach the client as ``tool_calls``, whole and streamed; a
    server in front of that one (``OpenAIChat`` as its model) passes them on the same."""
    from coinfer.chat.openai_api import OpenAIChat

    model = ScriptedChat(_weather_or_text, name="m1")
    with ChatServer(model) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        whole = _ask_weather(client, "m1", "Paris").choices[0]
        assert whole.finish_reason == "tool_calls" and whole.message.content == "Checking."
        assert _calls(whole.message.tool_calls) == [("get_weather", {"city": "Paris"})]
        assert (
            model.requests[-1].tools is not None
            and model.requests[-1].tools.specs[0]["function"]["name"] == "get_weather"
        )
        chunks = [c.choices[0] for c in _ask_weather(client, "m1", "Oslo", stream=True) if c.choices]
        assert "".join(c.delta.content or "" for c in chunks) == "Checking."
        assert _calls(t for c in chunks for t in c.delta.tool_calls or []) == [
            ("get_weather", {"city": "Oslo"})
        ]
        assert chunks[-1].finish_reason == "tool_calls"
        text = _ask_weather(client, "m1", "hi").choices[0]
        assert (
            text.message.content == "hello" and not text.message.tool_calls and text.finish_reason == "stop"
        )
        told_not_to = _ask_weather(client, "m1", "Rome", tool_choice="none").choices[0]
        assert told_not_to.message.content == "hello" and model.requests[-1].tools is None
        with ChatServer(OpenAIChat("m1", base_url=server.url, api_key="unused")) as front:
            ahead = openai.OpenAI(base_url=front.url, api_key="unused", max_retries=0)
            passed_on = _ask_weather(ahead, "m1", "Lima").choices[0]
            assert passed_on.finish_reason == "tool_calls" and passed_on.message.content == "Checking."
            assert _calls(passed_on.message.tool_calls) == [("get_weather", {"city": "Lima"})]


def test_a_key_is_needed_everywhere_but_health(monkeypatch: pytest.MonkeyPatch) -> None:
    with ChatServer(ScriptedChat(_reply, name="m1"), api_key="s3cret") as server:
        base = server.url.removesuffix("/v1")
        assert _http(base + "/health")[0] == 200
        assert _http(server.url + "/models")[0] == 401
        assert _http(server.url + "/models", headers={"Authorization": "Bearer wrong"})[0] == 401
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0).models.list()
        assert [m.id for m in openai.OpenAI(base_url=server.url, api_key="s3cret").models.list()] == ["m1"]


def test_past_the_queue_a_request_gets_429_with_retry_after() -> None:
    gate = threading.Event()

    def slow(r: ChatRequest) -> str:
        gate.wait(20)
        return "late"

    server = ChatServer(ScriptedChat(slow, name="m1"), max_batch=1)
    server.served["m1"].max_queue = 1
    with server:
        body = json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode()
        first: list[Any] = []
        t = threading.Thread(target=lambda: first.append(_http(server.url + "/chat/completions", body)))
        t.start()
        while server.served["m1"].depth < 1:
            time.sleep(0.01)
        status, headers, error = _http(server.url + "/chat/completions", body)
        assert (
            status == 429
            and int(headers["Retry-After"]) >= 1
            and error["error"]["type"] == "rate_limit_error"
        )
        gate.set()
        t.join(20)
        assert first[0][0] == 200 and first[0][2]["choices"][0]["message"]["content"] == "late"


def test_a_body_past_the_cap_gets_413(monkeypatch: pytest.MonkeyPatch) -> None:
    from coinfer.serve import app

    monkeypatch.setattr(app, "MAX_BODY", 100)
    with ChatServer(ScriptedChat(_reply, name="m1")) as server:
        big = json.dumps({"messages": [{"role": "user", "content": "x" * 200}]}).encode()
        assert _http(server.url + "/chat/completions", big)[0] == 413


def test_health_and_metrics_report_the_queue_requests_and_tokens() -> None:
    with ChatServer(ScriptedChat(_reply, name="m1")) as server:
        base = server.url.removesuffix("/v1")
        openai.OpenAI(base_url=server.url, api_key="unused").chat.completions.create(
            model="m1", messages=[{"role": "user", "content": "a b c"}]
        )
        status, _, health = _http(base + "/health")
        assert status == 200 and health == {"status": "ok", "models": {"m1": 0}}
        text = _http(base + "/metrics")[2].decode()
        assert 'coinfer_requests_total{model="m1",status="200"} 1.0' in text
        assert 'coinfer_completion_tokens_total{model="m1"} 5.0' in text
        assert 'coinfer_queue_depth{model="m1"} 0.0' in text
        assert "coinfer_request_seconds_bucket" in text


def test_a_part_lost_for_good_is_named_answered_503_and_taken_out_by_health() -> None:
    """A served model whose part is lost for good (a Jupiter device that died): the request
    it failed learns which part and why, not the broken connection; every later one is
    answered 503 with the same line; ``/health`` answers 503, so a load balancer's check
    takes the replica out."""
    from coinfer.errors import TransportError

    lost: list[str] = []

    def reply(r: ChatRequest) -> str:
        if r.messages[-1]["content"] == "die":
            lost.append("device 1 (pid 4242) ran out of its 1.50 GiB budget (the OS's OOM killer ended it)")
            raise TransportError("a device stopped answering: Connection closed by peer")
        return _reply(r)

    with ChatServer(ScriptedChat(reply, name="m1")) as server:
        server.served["m1"].lost_part = lambda: lost[0] if lost else None
        base = server.url.removesuffix("/v1")
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        ask = [{"role": "user", "content": "hi"}]
        answer = client.chat.completions.create(model="m1", messages=ask)
        assert answer.choices[0].message.content == "you said hi"
        assert _http(base + "/health")[0] == 200
        for content in ("die", "hi"):  # the one it failed, then the next
            with pytest.raises(openai.InternalServerError, match=r"device 1 \(pid 4242\) ran out") as caught:
                client.chat.completions.create(model="m1", messages=[{"role": "user", "content": content}])
            assert caught.value.status_code == 503 and "restart the server" in str(caught.value)
        status, _, health = _http(base + "/health")
        assert status == 503 and health["status"] == "unavailable" and "pid 4242" in health["lost"]["m1"]
        text = _http(base + "/metrics")[2].decode()
        assert 'coinfer_requests_total{model="m1",status="503"} 2.0' in text
