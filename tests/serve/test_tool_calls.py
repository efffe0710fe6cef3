"""Tool calls served: a real model whose template takes tools, through the official client
and the library's chat models; every engine that continues the rendered prompt gives the
same calls."""

from __future__ import annotations

import json
import urllib.request

import pytest

from tests.chat.test_tools import TIME, WEATHER
from tests.conftest import needs_llama


@needs_llama
@pytest.mark.slow
def test_the_official_client_gets_tool_calls_from_a_real_model() -> None:
    """Qwen2.5-Coder's template tells it of the tools; its call comes back as
    ``tool_calls`` whole and streamed; ``required`` forces one; the tool's result goes
    back in the next request; the library's ``OpenAIChat`` does the same."""
    from openai import BadRequestError, OpenAI

    from coinfer.chat import ChatRequest, OpenAIChat, Tools
    from coinfer.serve.process import ServerProcess

    question = [{"role": "user", "content": "What's the weather like in Paris today?"}]
    with ServerProcess("qwen2.5-coder-0.5b", ctx=2048, max_batch=2) as server:
        client = OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        ask = {"model": "qwen2.5-coder-0.5b", "tools": [WEATHER], "temperature": 0, "max_tokens": 60}
        reply = client.chat.completions.create(messages=question, **ask)  # type: ignore[call-overload]
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather" and json.loads(call.function.arguments)["city"] == "Paris"

        chunks = list(client.chat.completions.create(messages=question, stream=True, **ask))  # type: ignore[call-overload]
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        streamed = [t for d in deltas for t in d.tool_calls or []]
        assert [(t.function.name, t.function.arguments) for t in streamed] == [
            (call.function.name, call.function.arguments)
        ]
        assert not "".join(d.content or "" for d in deltas)
        assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"

        greeting = [{"role": "user", "content": "Say hello to Bob."}]
        forced = client.chat.completions.create(messages=greeting, tool_choice="required", **ask)  # type: ignore[call-overload]
        assert forced.choices[0].finish_reason == "tool_calls"
        assert forced.choices[0].message.tool_calls[0].function.name == "get_weather"

        result = {"role": "tool", "tool_call_id": call.id, "content": '{"temperature_c": 14}'}
        history = [*question, choice.message.model_dump(exclude_none=True), result]
        after = client.chat.completions.create(messages=history, **{**ask, "max_tokens": 4})  # type: ignore[call-overload]
        assert after.usage is not None and reply.usage is not None
        assert after.usage.prompt_tokens > reply.usage.prompt_tokens + reply.usage.completion_tokens
        with urllib.request.urlopen(server.url.removesuffix("/v1") + "/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        assert 'coinfer_tool_answers_total{model="qwen2.5-coder-0.5b",outcome="calls"} 3.0' in metrics
        with pytest.raises(BadRequestError, match="cannot both follow a schema"):
            client.chat.completions.create(
                messages=question, tool_choice="required", response_format={"type": "json_object"}, **ask
            )  # type: ignore[call-overload]

        # the library's remote chat model asks with tools and reads the calls back the same
        remote = OpenAIChat("qwen2.5-coder-0.5b", base_url=server.url, api_key="unused")
        got = remote.chat(ChatRequest(question, max_tokens=60, tools=Tools((WEATHER,))))
        assert got.finish_reasons == ["tool_calls"] and got.text == ""
        assert [(c.name, c.arguments) for c in got.calls] == [(call.function.name, call.function.arguments)]
        back = [
            *question,
            {"role": "assistant", "content": "", "tool_calls": [got.calls[0].as_openai()]},
            {"role": "tool", "tool_call_id": got.calls[0].id, "content": '{"temperature_c": 14}'},
        ]
        again = remote.chat(ChatRequest(back, max_tokens=4, tools=Tools((WEATHER,))))
        assert again.usage.prompt_tokens == after.usage.prompt_tokens  # the same history as the client's


@needs_llama
@pytest.mark.slow
def test_llmcad_and_collective_serving_give_the_plain_engines_calls() -> None:
    """The engines that continue the rendered prompt take tools as plain serving does:
    lossless greedy decoding writes the same reply, so the same call comes back (a stream is
    read the same way whatever the engine: the test above). Qwen2.5-Coder-0.5B is every
    target, and LLMCad's draft."""
    from openai import OpenAI

    from coinfer.chat import ChatRequest, Tools, open_local_chat
    from coinfer.decoding import NgramDrafter
    from coinfer.engines import get
    from coinfer.models import load_model
    from coinfer.serve import Server
    from coinfer.serve.engines import served

    chat = open_local_chat("qwen2.5-coder-0.5b", n_ctx=2048, parallel=2)
    models = [load_model("qwen2.5-coder-0.5b", backend="llama.cpp", n_ctx=2048) for _ in range(3)]
    cad_target, cad_draft, voted = models
    sessions = {
        "plain": get("plain").open({"target": chat.model, "chat": chat}),
        "llmcad": get("llmcad").open({"target": cad_target, "draft_model": cad_draft}),
        "collective": get("collective").open({"target": voted, "drafts": [NgramDrafter()]}),
    }
    question = [{"role": "user", "content": "What's the weather like in Paris today?"}]
    ask = {"messages": question, "tools": [WEATHER, TIME], "temperature": 0, "max_tokens": 48}
    try:
        local = chat.chat(ChatRequest(question, max_tokens=48, tools=Tools((WEATHER, TIME))))
        with Server({n: served(s, name=n) for n, s in sessions.items()}) as server:
            client = OpenAI(base_url=server.url, api_key="unused", max_retries=0)
            answers = {}
            for name in sessions:
                message = client.chat.completions.create(model=name, **ask).choices[0].message  # type: ignore[call-overload]
                calls = [
                    (t.function.name, json.loads(t.function.arguments)) for t in message.tool_calls or []
                ]
                answers[name] = (message.content, calls)
    finally:
        chat.model.close()
        for m in models:
            m.close()
    assert answers["plain"][1] and answers["plain"][1][0][0] == "get_weather"
    assert answers["llmcad"] == answers["plain"] and answers["collective"] == answers["plain"]
    # the library's local chat model: the same prompt and reply, so the same calls
    assert [(c.name, json.loads(c.arguments)) for c in local.calls] == answers["plain"][1]
    assert local.finish_reasons == ["tool_calls"] and local.text == (answers["plain"][0] or "")
