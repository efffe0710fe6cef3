"""OpenAI bodies into requests: defaults as OpenAI's, and a bad field named in the error."""

from __future__ import annotations

import pytest

from coinfer.errors import ConfigError
from coinfer.serve.schemas import read_body

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}


def test_a_chat_body_becomes_a_request_with_openais_defaults() -> None:
    r = read_body("chat", {**CHAT, "stream": True, "stream_options": {"include_usage": True}, "stop": "\n"})
    assert (r.kind, r.model, r.n, r.temperature, r.top_p, r.stop, r.stream, r.include_usage) == (
        "chat", "m", 1, 1.0, 1.0, ("\n",), True, True,
    )  # fmt: skip
    assert r.messages == [{"role": "user", "content": "hi"}] and r.max_tokens == 512
    parts = {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    r = read_body("chat", {**CHAT, "messages": [parts], "response_format": {"type": "json_object"}})
    assert r.messages == [{"role": "system", "content": "ab"}] and r.json_schema == {"type": "object"}


def test_a_completion_body_reads_its_prompt_as_text() -> None:
    r = read_body("completion", {"prompt": "def f(", "temperature": 0, "max_tokens": 5})
    assert (r.kind, r.prompt, r.messages, r.temperature, r.max_tokens) == (
        "completion",
        "def f(",
        None,
        0.0,
        5,
    )
    assert read_body("completion", {"prompt": "x"}).max_tokens == 16  # OpenAI's default


@pytest.mark.parametrize(
    ("kind", "body", "field"),
    [
        ("chat", {"messages": []}, "messages"),
        ("chat", {**CHAT, "n": 0}, "n"),
        ("chat", {**CHAT, "temperature": "hot"}, "temperature"),
        ("chat", {**CHAT, "max_tokens": -1}, "max_tokens"),
        ("chat", {**CHAT, "stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ("chat", {**CHAT, "logprobs": True}, "logprobs"),
        ("chat", {**CHAT, "tool_choice": "required"}, "tool_choice"),
        ("chat", {**CHAT, "response_format": {"type": "xml"}}, "response_format"),
        ("chat", {**CHAT, "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
        ("completion", {"prompt": ""}, "prompt"),
        ("completion", {"prompt": "x", "echo": True}, "echo"),
        # fields that would change the answer if ignored
        ("chat", {**CHAT, "tools": [{"type": "function"}], "tool_choice": "auto"}, "tools"),
        ("chat", {**CHAT, "tools": [{"type": "function", "function": {"name": "no spaces"}}]}, "tools"),
        (
            "chat",
            {**CHAT, "tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "g"}}},
            "tool_choice",
        ),
        ("chat", {**CHAT, "tools": [TOOL], "tool_choice": "sometimes"}, "tool_choice"),
        (
            "chat",
            {**CHAT, "tools": [TOOL], "tool_choice": "required", "response_format": {"type": "json_object"}},
            "response_format",
        ),
        (
            "chat",
            {
                **CHAT,
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "f", "arguments": "{not json"},
                            }
                        ],
                    }
                ],
            },
            "messages",
        ),
        ("chat", {**CHAT, "functions": [{"name": "f"}]}, "functions"),
        ("chat", {**CHAT, "presence_penalty": 0.5}, "presence_penalty"),
        ("chat", {**CHAT, "frequency_penalty": -1}, "frequency_penalty"),
        ("chat", {**CHAT, "logit_bias": {"151643": -100}}, "logit_bias"),
        ("completion", {"prompt": "x", "frequency_penalty": 1}, "frequency_penalty"),
        ("completion", {"prompt": "x", "suffix": "y"}, "suffix"),
        ("completion", {"prompt": "x", "best_of": 3}, "best_of"),
    ],
)
def test_a_bad_field_is_named(kind: str, body: dict, field: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=rf"^{field}\b"):
        read_body(kind, body)


def test_fields_that_would_not_change_the_answer_are_accepted() -> None:
    """What clients send by default or for their own books: neutral penalties, an empty
    bias, tools the model is told not to call, ``user``; the request is as without them."""
    plain = read_body("chat", CHAT)
    neutral = {"presence_penalty": 0, "frequency_penalty": 0.0, "logit_bias": {}, "user": "u1"}
    tools = {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"}
    assert read_body("chat", {**CHAT, **neutral, **tools}) == plain
    assert read_body("completion", {"prompt": "x", "best_of": 1, "suffix": ""}) == read_body(
        "completion", {"prompt": "x"}
    )


def test_a_body_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ConfigError, match="JSON object"):
        read_body("chat", ["messages"])


def test_tools_become_the_requests_tools_and_calls_in_the_chat_are_read() -> None:
    """Tools are called ``auto`` by default, as OpenAI's; ``required`` or one function
    constrains the reply to a call; an assistant's calls reach the template with their
    arguments as objects, and a tool's result with its call's id."""
    r = read_body("chat", {**CHAT, "tools": [TOOL]})
    assert r.tools is not None and (r.tools.choice, r.tools.names(), r.tools.parallel) == (
        "auto",
        ("f",),
        True,
    )
    assert r.tools.specs == (TOOL,) and r.json_schema is None
    named = {"type": "function", "function": {"name": "f"}}
    r = read_body("chat", {**CHAT, "tools": [TOOL], "tool_choice": named, "parallel_tool_calls": False})
    assert r.tools is not None and (r.tools.choice, r.tools.parallel) == ("f", False)
    properties = {"name": {"const": "f"}, "arguments": {"type": "object"}}
    assert r.json_schema == {"type": "object", "properties": properties, "required": ["name", "arguments"]}
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": '{"x": 1}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]  # fmt: skip
    assert read_body("chat", {**CHAT, "messages": chat, "tools": [TOOL]}).messages == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    ]  # fmt: skip
    # a chat model behind an API gets OpenAI's shape back: the arguments as JSON text
    sent = read_body("chat", {**CHAT, "messages": chat}).chat_request().messages[1]
    assert sent["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"x": 1}'}
