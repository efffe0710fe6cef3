"""Tool calls read back from a reply: OpenAI's ``tool_calls`` only where the reply is
calls of declared tools, its text otherwise, whole; a stream shows text at once and holds
back only what may be a call."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinfer.chat.tools import ToolCallScanner, Tools

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


SEARCH = {
    "type": "function",
    "function": {"name": "brave_search", "parameters": {"type": "object", "properties": {"query": {}}}},
}
PYTHON = {"type": "function", "function": {"name": "code_interpreter"}}


def test_llama_built_in_tools_are_read_as_calls_of_the_declared_tools_they_name_never_run() -> None:
    """Llama 3.x calls its built-in tools as ``name.call(key=value)`` after its tag, and its
    code interpreter with bare code: calls where the tool is declared, text otherwise."""
    tools = Tools((WEATHER, SEARCH, PYTHON))
    search = '<|python_tag|>brave_search.call(query="weather in Paris", top=(1, 2))'
    assert _calls(search, tools) == (None, [("brave_search", {"query": "weather in Paris", "top": [1, 2]})])
    code = "<|python_tag|>import sys\nprint(sys.version)"
    assert _calls(code, tools) == (None, [("code_interpreter", {"code": "import sys\nprint(sys.version)"})])
    assert _calls("Looking. <|python_tag|>get_weather.call(city='Paris')", tools) == (
        "Looking.",
        [("get_weather", {"city": "Paris"})],
    )
    for not_calls in (
        '<|python_tag|>wolfram_alpha.call(query="2+2")',  # not declared
        "<|python_tag|>brave_search.call(query=__import__('os').system('id'))",  # not a literal
        '<|python_tag|>brave_search.call("positional")',
        "<|python_tag|>brave_search.call(query={1, 2})",  # a set is not JSON
        code,  # no code interpreter declared
    ):
        assert _calls(not_calls, Tools((WEATHER, SEARCH))) == (not_calls, [])


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


def test_a_chat_result_reads_each_reply_as_calls_or_text() -> None:
    from coinfer.chat import ChatResult, Usage

    result = ChatResult.read(
        [f"Checking.\n<tool_call>{CALL}</tool_call>", "Sunny."], ["stop", "length"], Usage(), TOOLS
    )
    assert result.texts == ["Checking.", "Sunny."] and result.finish_reasons == ["tool_calls", "length"]
    assert [c.name for c in result.calls] == ["get_weather"] and result.tool_calls[1] == []
    plain = ChatResult.read([CALL], ["stop"], Usage(), None)  # no tools asked: the text as it came
    assert plain.texts == [CALL] and plain.calls == [] and plain.finish_reasons == ["stop"]


def test_a_chat_request_forces_a_call_by_its_schema_and_not_beside_another() -> None:
    from coinfer.chat import ChatRequest
    from coinfer.errors import ConfigError

    ask = [{"role": "user", "content": "Weather in Paris?"}]
    forced = ChatRequest(ask, tools=Tools((WEATHER, TIME), choice="get_weather"))
    assert forced.reply_schema == Tools((WEATHER,), choice="get_weather").forced_schema()
    assert ChatRequest(ask, tools=TOOLS, json_schema={"type": "object"}).reply_schema == {"type": "object"}
    with pytest.raises(ConfigError, match="forced tool call"):
        ChatRequest(ask, tools=Tools((WEATHER,), choice="required"), json_schema={"type": "object"})


def test_a_histories_call_arguments_go_to_an_api_as_text_and_to_a_template_as_objects() -> None:
    from coinfer.chat.tools import call_arguments_as
    from coinfer.errors import ConfigError

    def history(arguments: object) -> list[dict[str, object]]:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": arguments},
        }
        return [{"role": "assistant", "content": "", "tool_calls": [call]}, {"role": "tool", "content": "14"}]

    def arguments(messages: list[dict[str, object]]) -> object:
        return messages[0]["tool_calls"][0]["function"]["arguments"]  # type: ignore[index]

    as_text = call_arguments_as(history({"city": "Paris"}), text=True)
    assert arguments(as_text) == '{"city": "Paris"}' and as_text[1] == {"role": "tool", "content": "14"}
    assert arguments(call_arguments_as(history('{"city": "Paris"}'), text=False)) == {"city": "Paris"}
    assert call_arguments_as(as_text, text=True) == as_text  # already in the shape asked
    with pytest.raises(ConfigError, match="JSON object"):
        call_arguments_as(history("Paris"), text=False)
