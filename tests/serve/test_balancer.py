"""Replicas behind HAProxy (``coinfer balance``): the configuration, and two real
``coinfer serve`` replicas behind a real HAProxy on loopback, driven by the official
``openai`` client: requests spread, a conversation sticks, a killed replica costs only
its own clients, and one stopped gracefully (SIGTERM) costs nobody."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from coinfer.errors import ConfigError
from coinfer.serve.balancer import (
    REPLICA_HEADER,
    Balancer,
    check_config,
    haproxy_binary,
    haproxy_config,
    parse_replica,
)
from tests.cli.run import assert_user_error, coinfer
from tests.conftest import needs_llama


def _has_haproxy() -> bool:
    try:
        return bool(haproxy_binary())
    except ConfigError:
        return False


HAS_HAPROXY = _has_haproxy()
needs_haproxy = pytest.mark.skipif(
    not HAS_HAPROXY, reason="needs Debian's haproxy (scripts/install-debian-packages.sh installs it)"
)
MODEL = "smollm2-135m"
TOPICS = ["rivers", "volcanoes", "owls", "bridges", "comets", "deserts", "violins", "glaciers"]


def test_a_replica_is_host_and_port() -> None:
    assert parse_replica("127.0.0.1:8001") == ("127.0.0.1", 8001)
    assert parse_replica("http://10.0.0.2:9000/v1") == ("10.0.0.2", 9000)
    for bad in ("foo", "host:", ":80", "h:70000"):
        with pytest.raises(ConfigError, match="HOST:PORT"):
            parse_replica(bad)


def test_the_configuration_names_every_replica_and_the_affinity_key() -> None:
    text = haproxy_config([("127.0.0.1", 8001), ("127.0.0.2", 8002)], port=9000)
    assert "bind 127.0.0.1:9000" in text
    assert "server r0 127.0.0.1:8001 check" in text and "server r1 127.0.0.2:8002 check" in text
    assert "balance hash var(txn.key)" in text and "hash-type consistent" in text
    assert "req.hdr(x-coinfer-conversation)" in text and "$.messages[0].content" in text
    with pytest.raises(ConfigError, match="no replica"):
        haproxy_config([])


@needs_haproxy
def test_haproxy_accepts_the_configuration() -> None:
    check_config(haproxy_config([("127.0.0.1", 8001), ("127.0.0.1", 8002)]))
    with pytest.raises(ConfigError, match="haproxy refused"):
        check_config("frontend x\n    no-such-keyword\n")


def test_a_replica_that_is_not_host_and_port_is_one_line() -> None:
    assert_user_error(coinfer("balance", "--replica", "nope", "--print-config"), "HOST:PORT")


def _ask(client: Any, messages: list[dict[str, str]], max_tokens: int = 8) -> tuple[str, str]:
    """The reply's text and the replica that answered it."""
    raw = client.chat.completions.with_raw_response.create(
        model=MODEL, messages=messages, max_tokens=max_tokens, temperature=0
    )
    return raw.parse().choices[0].message.content or "", raw.headers[REPLICA_HEADER]


Chat = list[dict[str, str]]


def _stream(client: Any, messages: Chat, out: dict[str, Any], started: threading.Event) -> None:
    """A streaming request: its text, its finish reason, or the error that ended it."""
    text, finish = [], None
    try:
        for chunk in client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=160, temperature=0, stream=True
        ):
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
                out["so_far"] = len("".join(text))
                if out["so_far"]:
                    started.set()
    except Exception as exc:  # noqa: BLE001 - what the client saw is the result
        out["error"] = exc
    out["text"], out["finish"] = "".join(text), finish
    started.set()


@needs_llama
@needs_haproxy
def test_replicas_spread_stick_and_survive_one_killed(smollm_path: Path) -> None:
    from openai import OpenAI

    from coinfer.serve.process import ServerProcess

    with (
        ServerProcess(MODEL, ctx=512, max_batch=2) as r0,
        ServerProcess(MODEL, ctx=512, max_batch=2) as r1,
    ):
        replicas = [parse_replica(r0.url), parse_replica(r1.url)]
        with Balancer(replicas, check_ms=300) as balancer:
            client = OpenAI(base_url=balancer.url, api_key="unused", max_retries=0, timeout=120)

            # spread, and every turn of a conversation on the replica that read its opening
            home: dict[str, str] = {}
            for topic in TOPICS:
                first = [{"role": "user", "content": f"Write one sentence about {topic}."}]
                reply, home[topic] = _ask(client, first)
                more = [{"role": "assistant", "content": reply}, {"role": "user", "content": "More."}]
                assert _ask(client, [*first, *more])[1] == home[topic]
            assert set(home.values()) == {"r0", "r1"}

            # one long stream on each replica, alone first: the reference texts
            on0 = next(t for t in TOPICS if home[t] == "r0")
            on1 = next(t for t in TOPICS if home[t] == "r1")
            story = {
                t: [
                    {"role": "user", "content": f"Write one sentence about {t}."},
                    {"role": "user", "content": "Now a long story about it."},
                ]  # fmt: skip
                for t in (on0, on1)
            }
            alone = {t: _ask(client, story[t], max_tokens=160)[0] for t in (on0, on1)}

            # both at once; r0 is killed once both have begun
            results: dict[str, dict[str, Any]] = {on0: {}, on1: {}}
            started = {t: threading.Event() for t in results}
            threads = [threading.Thread(target=_stream, args=(client, story[t], r, started[t]))
                       for t, r in results.items()]  # fmt: skip
            for t in threads:
                t.start()
            assert all(e.wait(120) for e in started.values())
            os.kill(r0.pid, signal.SIGKILL)
            at_kill = results[on1].get("so_far", 0)
            for t in threads:
                t.join(120)

            survivor, killed = results[on1], results[on0]
            assert "error" not in survivor and survivor["text"] == alone[on1]  # untouched
            assert at_kill < len(alone[on1])  # it was streaming when the other replica died
            # cut mid-stream: the client raised, and nothing pretended the answer was whole
            assert killed["finish"] is None and "error" in killed
            assert len(killed["text"]) < len(alone[on0])
            # its conversation goes on, on the replica that is left
            reply, where = _ask(client, story[on0])
            assert where == "r1" and reply


@needs_llama
@needs_haproxy
def test_a_replica_stopped_gracefully_finishes_its_streams_while_the_others_take_new_requests(
    smollm_path: Path,
) -> None:
    """A rolling restart: SIGTERM one replica while it streams. Its stream runs to its end
    (``--drain``); its health check takes it out, the requests that reach it meanwhile
    get 503 and the balancer retries them on the other, so no client sees an error; it
    then exits by itself."""
    from openai import OpenAI

    from coinfer.serve.process import ServerProcess

    with (
        ServerProcess(MODEL, ctx=512, max_batch=2, extra_args=["--drain", "60"]) as r0,
        ServerProcess(MODEL, ctx=512, max_batch=2) as r1,
    ):
        replicas = [parse_replica(r0.url), parse_replica(r1.url)]
        with Balancer(replicas, check_ms=300) as balancer:
            client = OpenAI(base_url=balancer.url, api_key="unused", max_retries=0, timeout=120)
            home = {
                t: _ask(client, [{"role": "user", "content": f"Write one sentence about {t}."}])
                for t in TOPICS
            }
            on0 = [t for t in TOPICS if home[t][1] == "r0"]
            assert on0 and len(on0) < len(TOPICS)
            story = [{"role": "user", "content": f"Write a long story about {on0[0]}."}]
            alone = _ask(client, story, max_tokens=160)[0]

            result: dict[str, Any] = {}
            started = threading.Event()
            streaming = threading.Thread(target=_stream, args=(client, story, result, started))
            streaming.start()
            assert started.wait(120)
            os.kill(r0.pid, signal.SIGTERM)
            _wait_draining(r0.url)  # the signal reached it (a request just before is r0's own, whole)
            # while r0 drains, its conversations are answered, by r1
            during = [
                _ask(client, [{"role": "user", "content": f"Write one sentence about {t}."}]) for t in on0
            ]
            streaming.join(120)

            assert "error" not in result and result["text"] == alone  # the draining replica's stream, whole
            assert [where for _, where in during] == ["r1"] * len(on0)
            assert [reply for reply, _ in during] == [home[t][0] for t in on0]  # the same greedy answers
            assert r0._proc is not None and r0._proc.wait(timeout=60) == 0  # it stopped by itself


def _wait_draining(url: str) -> None:
    """Until the replica at ``url`` answers ``/health`` with 503 (draining)."""
    import time
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url.removesuffix("/v1") + "/health", timeout=5):
                pass
        except urllib.error.HTTPError as exc:
            if exc.code == 503:
                return
        time.sleep(0.01)
    raise AssertionError(f"{url} did not start draining")
