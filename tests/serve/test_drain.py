"""A graceful stop (``Server.stop(drain_s)``, ``coinfer serve``'s SIGTERM): while it drains,
new requests get 503 and ``/health`` says ``draining``; the open requests run to their end,
and those still open when the drain ends get a clean error, in their stream or as a 503."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from coinfer.chat.local import LocalChat
from coinfer.serve import Server
from coinfer.serve.served import PlainServed
from coinfer.testing import ScriptedModel

openai = pytest.importorskip("openai")

TOKEN_S = 0.01  # each token's forward, so that a long answer is still running when the stop comes


def _paced(prefix: list[int]) -> int:
    time.sleep(TOKEN_S)
    return 97  # "a", never an end token: an answer runs to its budget


@pytest.fixture
def server() -> Iterator[Server]:
    chat = LocalChat(ScriptedModel(_paced, n_ctx=4096, name="m"), max_concurrent=4, keep=0)
    server = Server({"m": PlainServed(chat)}).start()
    yield server
    server.stop()


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _streamed(client: Any, max_tokens: int, started: threading.Event, out: dict[str, Any]) -> None:
    """One greedy streaming completion (the scripted model has no chat template): its text,
    its finish reason, or the error that ended it."""
    out["text"], out["finish"] = "", None
    try:
        for c in client.completions.create(
            model="m", prompt="go", max_tokens=max_tokens, temperature=0, stream=True
        ):
            if c.choices:
                out["text"] += c.choices[0].text
                out["finish"] = c.choices[0].finish_reason or out["finish"]
                if out["text"]:
                    started.set()
    except openai.APIError as exc:
        out["error"] = exc
    finally:
        started.set()


def _stop_while_streaming(
    server: Server, max_tokens: int, drain_s: float, hurry: threading.Event | None = None
) -> tuple[dict[str, Any], Any, Any]:
    """A stream started, then ``stop(drain_s, hurry=hurry)``; meanwhile /health and a new
    request, then ``hurry`` set. Returns the stream's outcome, /health's answer and the new
    request's error."""
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    started, out = threading.Event(), {}
    streaming = threading.Thread(target=_streamed, args=(client, max_tokens, started, out))
    streaming.start()
    assert started.wait(20) and out["text"], out
    base = server.url.removesuffix("/v1")
    stopping = threading.Thread(target=server.stop, args=(drain_s,), kwargs={"hurry": hurry})
    stopping.start()
    while not server.served["m"].draining:
        time.sleep(0.005)
    health = _get(base + "/health")
    with pytest.raises(openai.APIStatusError) as refused:
        client.completions.create(model="m", prompt="late", max_tokens=4)
    if hurry is not None:
        hurry.set()
    streaming.join(60)
    stopping.join(60)
    assert not streaming.is_alive() and not stopping.is_alive()
    return out, health, refused.value


def test_a_drain_lets_the_open_requests_finish_and_refuses_new_ones(server: Server) -> None:
    out, (status, health), refused = _stop_while_streaming(server, max_tokens=150, drain_s=60)
    assert "error" not in out and out["text"] == "a" * 150 and out["finish"] == "length"  # the whole answer
    assert status == 503 and health["status"] == "draining"  # a load balancer takes the replica out
    assert refused.status_code == 503 and "shutting down" in refused.message
    assert server.open_requests == 0


def test_what_is_open_when_the_drain_ends_hears_why(server: Server) -> None:
    out, (status, _), refused = _stop_while_streaming(server, max_tokens=3000, drain_s=0.2)
    assert status == 503 and refused.status_code == 503
    assert 0 < len(out["text"]) < 3000 and out["finish"] is None  # cut short, and not told it finished
    assert "shutting down" in str(out["error"])  # told why, in the stream
    assert server.open_requests == 0


def test_a_second_signal_ends_the_drain_at_once(server: Server) -> None:
    """``coinfer serve`` sets ``hurry`` on a second SIGTERM or Ctrl-C: a drain of ten
    minutes ends at once, and the stream still open (half a minute's answer) hears why."""
    out, _, _ = _stop_while_streaming(server, max_tokens=3000, drain_s=600, hurry=threading.Event())
    assert 0 < len(out["text"]) < 3000 and "shutting down" in str(out["error"])
