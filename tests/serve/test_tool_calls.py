"""Tool calls read back from a reply: OpenAI's ``tool_calls`` only where the reply is
calls of declared tools, its text otherwise, whole; a stream shows text at once and holds
back only what may be a call. The served path with a real model whose template takes
tools, through the official client."""

from __future__ import annotations

import json
import urllib.request

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinfer.serve.tool_calls import ToolCallScanner, Tools
from tests.conftest import needs_llama

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
TOOLS = Tools((WEATHER, TIME))
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def _calls(text: str, tools: Tools = TOOLS) -> tuple[str | None, list[tuple[str, dict]]]:  # type: ignore[type-arg]
    content, calls = tools.read(text)
    return content, [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize(
    "reply",
    [
        f"<tool_call>\n{CALL}\n</tool_call>",  # the template's own form (Qwen2.5, Hermes)
        f"<tool_call>\n{CALL}",  # its closing tag never came
        CALL,  # bare, as the Qwen2.5-Coder models answer
        f"```json\n{CALL}\n```",
        f"\n```\n{CALL}\n```\n",
        f"[{CALL}]",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        '{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}',  # arguments as JSON text
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}',  # Llama 3.x
        f"[TOOL_CALLS] [{CALL}]",  # Mistral's templates before v11
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',  # Mistral's v11 templates
    ],
)
def test_a_reply_that_is_a_call_becomes_tool_calls(reply: str) -> None:
    assert _calls(reply) == (None, [("get_weather", {"city": "Paris"})])


def test_text_before_the_calls_is_the_content_and_several_calls_are_kept() -> None:
    second = '{"name": "get_time", "arguments": {}}'
    reply = f"Let me look.\n<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n{second}\n</tool_call>"
    assert _calls(reply) == ("Let me look.", [("get_weather", {"city": "Paris"}), ("get_time", {})])
    one = Tools((WEATHER, TIME), parallel=False)
    assert _calls(reply, one) == ("Let me look.", [("get_weather", {"city": "Paris"})])
    content, calls = TOOLS.read(reply)
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)


def test_llama_and_mistral_markers_carry_several_calls_and_mistral_gets_ids_its_template_takes() -> None:
    second = '{"name": "get_time", "parameters": {}}'
    llama = f'<|python_tag|>{{"name": "get_weather", "parameters": {{"city": "Paris"}}}}; {second}'
    assert _calls(llama) == (None, [("get_weather", {"city": "Paris"}), ("get_time", {})])
    mistral = 'Checking. [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}'
    assert _calls(mistral) == ("Checking.", [("get_weather", {"city": "Paris"}), ("get_time", {})])
    _, calls = TOOLS.read(mistral)  # its template refuses a history with ids of another shape
    assert all(len(c.id) == 9 and c.id.isalnum() for c in calls) and calls[0].id != calls[1].id
    quoting = '{"name": "get_weather", "arguments": {"city": "[TOOL_CALLS] <tool_call>"}}'
    assert _calls(quoting) == (None, [("get_weather", {"city": "[TOOL_CALLS] <tool_call>"})])
    for not_calls in (
        "[TOOL_CALLS]rm_rf[ARGS]{}",
        "[TOOL_CALLS]get_weather[ARGS][1]",
        f"<|python_tag|>{CALL}; x",
    ):
        assert _calls(not_calls) == (not_calls, [])


@pytest.mark.parametrize(
    "reply",
    [
        "The weather in Paris is mild.",
        '{"name": "delete_everything", "arguments": {}}',  # not a declared tool
        '{"name": "get_weather", "arguments": [1, 2]}',  # arguments not an object
        '{"city": "Paris"}',  # JSON, not a call
        f"{CALL}\n{CALL}",  # two objects in a row: not one value
        f"<tool_call>\n{CALL}\n</tool_call>\nand then I made something up",
        "<tool_call>\n{not json}\n</tool_call>",
        f"Here is the format: <tool_call>{CALL}</tool_call> — use it wisely",
        f"```python\nprint({CALL})\n```",
    ],
)
def test_a_reply_that_is_not_only_calls_is_its_text_whole(reply: str) -> None:
    assert _calls(reply) == (reply, [])


def test_a_forced_call_is_one_tools_schema_or_any_of_them() -> None:
    assert Tools((WEATHER, TIME)).forced_schema() is None
    named = Tools((WEATHER, TIME), choice="get_weather").forced_schema()
    assert named == {
        "type": "object",
        "properties": {"name": {"const": "get_weather"}, "arguments": WEATHER["function"]["parameters"]},  # type: ignore[index]
        "required": ["name", "arguments"],
    }
    required = Tools((WEATHER, TIME), choice="required").forced_schema()
    assert required is not None and [a["properties"]["name"] for a in required["anyOf"]] == [
        {"const": "get_weather"},
        {"const": "get_time"},
    ]


def _stream(pieces: list[str]) -> tuple[list[str], str, list[str]]:
    scanner = ToolCallScanner(TOOLS)
    shown = [scanner.push(p) for p in pieces]
    rest, calls = scanner.finish()
    return shown, rest, [c.name for c in calls]


def test_a_stream_shows_text_at_once_and_never_a_piece_of_a_call() -> None:
    shown, rest, calls = _stream(["The sea", " is calm", " today."])
    assert (shown, rest, calls) == (["The sea", " is calm", " today."], "", [])
    reply = f"Checking.\n<tool_call>\n{CALL}\n</tool_call>"
    shown, rest, calls = _stream(list(reply))  # a character at a time
    assert "".join(shown) == "Checking.\n" and (rest, calls) == ("", ["get_weather"])
    shown, rest, calls = _stream([CALL[:5], CALL[5:20], CALL[20:]])
    assert (shown, rest, calls) == (["", "", ""], "", ["get_weather"])
    shown, rest, calls = _stream(
        ['{"a": 1} ', f"<tool_call>{CALL}</tool_call>"]
    )  # held, then text before a call
    assert (shown, rest, calls) == (["", ""], '{"a": 1}', ["get_weather"])


def test_held_text_that_was_no_call_is_shown_whole_at_the_end() -> None:
    code = "```python\nprint(1)\n```"
    shown, rest, calls = _stream(["``", "`py", "thon\nprint(1)\n```"])
    assert "".join(shown) + rest == code and calls == []
    assert shown[-1]  # released once it could no longer be a call
    shown, rest, calls = _stream(['{"city":', ' "Paris"}'])
    assert (shown, rest, calls) == (["", ""], '{"city": "Paris"}', [])
    shown, rest, calls = _stream(["a <tool", "_cal", "endar>"])
    assert "".join(shown) + rest == "a <tool_calendar>" and calls == []


@needs_llama
@pytest.mark.slow
def test_the_official_client_gets_tool_calls_from_a_real_model() -> None:
    """Qwen2.5-Coder's template tells it of the tools; its call comes back as
    ``tool_calls`` whole and streamed; ``required`` forces one; the tool's result goes
    back in the next request."""
    from openai import BadRequestError, OpenAI

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


_FRAGMENTS = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<tool",
        "_call>",
        CALL,
        "```",
        "json",
        "\n",
        " ",
        "{",
        "}",
        "Hi.",
        '"name"',
        "[",
        "]",
        ", ",
        "<|python_tag|>",
        "[TOOL_CALLS]",
        "[TOOL_",
        "get_weather[ARGS]",
        ";",
    ]
)


@given(st.lists(_FRAGMENTS | st.text(max_size=4), max_size=8), st.lists(st.integers(0, 200), max_size=6))
def test_a_stream_says_what_the_whole_reply_says_however_it_is_cut(parts: list[str], cuts: list[int]) -> None:
    """Whatever the pieces, a stream's text and calls are the whole reply's: the text
    shown is the reply's (all of it, or up to its calls), and nothing is lost."""
    text = "".join(parts)
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    shown, rest, calls = _stream([text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)])
    content, whole = TOOLS.read(text)
    assert calls == [c.name for c in whole]
    if whole:
        assert text.startswith("".join(shown))
        assert ("".join(shown) + rest).rstrip() == (content or "")
    else:
        assert "".join(shown) + rest == text


@needs_llama
@pytest.mark.slow
def test_llmcad_and_collective_serving_give_the_plain_engines_calls() -> None:
    """The engines that continue the rendered prompt take tools as plain serving does:
    lossless greedy decoding writes the same reply, so the same call comes back (a stream is
    read the same way whatever the engine: the test above). Qwen2.5-Coder-0.5B is every
    target, and LLMCad's draft."""
    from openai import OpenAI

    from coinfer.chat import open_local_chat
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
