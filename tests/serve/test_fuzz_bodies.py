"""Fuzzing OpenAI request bodies (chat and completions, streaming, n, tools, schemas):
a ``ServeRequest`` or one ``ConfigError`` (the server's 400), never another exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinfer.errors import ConfigError
from coinfer.serve.schemas import MAX_N, ServeRequest, read_body
from tests.fuzzing import json_values, within_deadline

pytestmark = pytest.mark.fuzz

_ANY = json_values
_PART = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url"]) | _ANY}, optional={"text": _ANY}
)
_NAME = st.sampled_from(["f", "get_weather", "no spaces", ""]) | _ANY
_CALL = st.fixed_dictionaries(
    {
        "function": st.fixed_dictionaries(
            {"name": _NAME}, optional={"arguments": st.text(max_size=20) | _ANY}
        )
        | _ANY
    },
    optional={"id": _ANY, "type": st.sampled_from(["function", "custom"]) | _ANY},
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "developer", "tool", ""]) | _ANY},
    optional={
        "content": st.text() | st.none() | st.lists(_PART, max_size=3) | _ANY,
        "name": _ANY,
        "tool_calls": st.lists(_CALL, max_size=2) | _ANY,
        "tool_call_id": _ANY,
    },
)  # fmt: skip
_TOOL = st.fixed_dictionaries(
    {"type": st.just("function") | _ANY},
    optional={"function": st.fixed_dictionaries({"name": _NAME}, optional={"parameters": _ANY}) | _ANY},
)
_CHOICE = st.sampled_from(["none", "auto", "required"]) | st.fixed_dictionaries(
    {"type": st.just("function"), "function": st.fixed_dictionaries({"name": _NAME})}
)
_SCHEMA = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "json_object", "json_schema", "xml"]) | _ANY},
    optional={"json_schema": st.fixed_dictionaries({}, optional={"schema": _ANY, "name": _ANY}) | _ANY},
)
_COMMON = {
    "model": st.text(max_size=20) | _ANY,
    "stream": st.booleans() | _ANY,
    "stream_options": st.fixed_dictionaries({}, optional={"include_usage": _ANY}) | _ANY,
    "n": st.integers(-2, MAX_N + 2) | _ANY,
    "temperature": st.floats(-1, 3) | _ANY,
    "top_p": st.floats(-1, 2) | _ANY,
    "seed": st.integers() | _ANY,
    "stop": st.text(max_size=5) | st.lists(st.text(max_size=5), max_size=6) | _ANY,
    "logprobs": _ANY,
    "max_tokens": st.integers(-5, 1 << 22) | _ANY,
}
chat_bodies = st.fixed_dictionaries(
    {"messages": st.lists(_MESSAGE, max_size=4) | _ANY},
    optional={
        **_COMMON,
        "max_completion_tokens": st.integers(-5, 1 << 22) | _ANY,
        "response_format": _SCHEMA | _ANY,
        "tools": st.lists(_TOOL | _ANY, max_size=2) | _ANY,
        "tool_choice": _CHOICE | _ANY,
        "parallel_tool_calls": st.booleans() | _ANY,
        "documents": st.lists(st.fixed_dictionaries({"name": _ANY, "text": _ANY}), max_size=3) | _ANY,
    },
)
completion_bodies = st.fixed_dictionaries(
    {"prompt": st.text() | _ANY}, optional={**_COMMON, "echo": st.booleans() | _ANY}
)


def _read(kind: str, body: Any) -> ServeRequest | None:
    try:
        return within_deadline(lambda: read_body(kind, body))
    except ConfigError as exc:
        assert str(exc)  # says what to fix
        return None


@given(chat_bodies | _ANY)
def test_any_chat_body_is_a_request_or_a_config_error(body: Any) -> None:
    request = _read("chat", body)
    if request is not None:
        assert request.messages and 1 <= request.n <= MAX_N and request.max_tokens >= 1
        request.chat_request()  # and it becomes a chat request the engines take
        if request.tools is not None:  # tools the model can be told of, a forced call's schema
            assert request.tools.names() and request.tools.choice in (
                "auto",
                "required",
                *request.tools.names(),
            )
            if request.tools.choice != "auto":
                assert request.json_schema == request.tools.forced_schema()


@given(completion_bodies | _ANY)
def test_any_completion_body_is_a_request_or_a_config_error(body: Any) -> None:
    request = _read("completion", body)
    if request is not None:
        assert request.prompt and 1 <= request.n <= MAX_N and request.max_tokens >= 1
