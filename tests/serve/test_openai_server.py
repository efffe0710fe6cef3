"""The OpenAI-compatible server: routes, and bad requests answered with errors, not crashes."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from coinfer.errors import ConfigError
from coinfer.serve import ChatServer, parse_chat_body
from coinfer.testing import ScriptedChat

HI = b'{"messages": [{"role": "user", "content": "hi"}]}'


def _post(url: str, body: bytes) -> tuple[int, Any]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_routes_and_errors() -> None:
    with ChatServer(ScriptedChat(lambda r: "ok", name="m1")) as server:
        with urllib.request.urlopen(server.url + "/models", timeout=10) as resp:
            assert json.loads(resp.read())["data"][0]["id"] == "m1"
        status, body = _post(
            server.url + "/chat/completions", b'{"messages": [{"role": "user", "content": "hi"}]}'
        )
        assert status == 200 and body["choices"][0]["message"]["content"] == "ok"
        assert body["usage"]["total_tokens"] == 2
        for bad in (b"not json", b'{"messages": "hi"}', b'{"messages": [{"role": "robot", "content": "x"}]}'):
            status, body = _post(server.url + "/chat/completions", bad)
            assert status == 400 and body["error"]["type"] == "invalid_request_error"
        status, _ = _post(server.url + "/nowhere", b"{}")
        assert status == 404
        # still serving after the bad requests
        assert (
            _post(server.url + "/chat/completions", b'{"messages": [{"role": "user", "content": "a"}]}')[0]
            == 200
        )


def test_the_server_binds_to_loopback_by_default() -> None:
    with ChatServer(ScriptedChat(lambda r: "")) as server:
        assert server.url.startswith("http://127.0.0.1:")


SCHEMA = {"type": "object"}


def test_body_fields_become_a_request() -> None:
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "n": 2,
        "max_completion_tokens": 7,
        "temperature": 0,
        "seed": 3,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "r", "schema": {"type": "object"}},
        },
    }
    req = parse_chat_body(body)
    assert (req.n, req.max_tokens, req.temperature, req.seed, req.json_schema) == (
        2,
        7,
        0.0,
        3,
        {"type": "object"},
    )
    with pytest.raises(ConfigError, match="^n: "):  # the field named
        parse_chat_body({**body, "n": 99})
    with pytest.raises(ConfigError, match=r"^messages\.0\.role: "):
        parse_chat_body({**body, "messages": [{"role": "robot", "content": "x"}]})
