"""A session served as it declares: one request at a time, or ``concurrent()`` at once,
each on its own thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator

import pytest

from coinfer.decoding.engine import Engine, Request, Session
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import DecodeStats, Response
from coinfer.serve.schemas import read_body
from coinfer.serve.served import Event, SessionServed
from tests.serve.events import Requests


class _Meeting(Session):
    """Each request waits until ``width`` requests are inside ``stream`` together."""

    def __init__(self, width: int, declared: int, timeout: float = 10) -> None:
        super().__init__(_MeetingEngine(), {}, None, Learned())
        self.width, self.declared = width, declared
        self.inside = threading.Barrier(width, timeout=timeout)

    def concurrent(self) -> int:
        return self.declared

    def stream(self, request: Request) -> Generator[Response, None, None]:
        self.inside.wait()  # BrokenBarrierError where fewer run at once
        yield Response(request.question or "", [], DecodeStats(1), "stop")


class _MeetingEngine(Engine):
    name = "meeting"
    answers = True
    parts = ()


def _serve(session: _Meeting, count: int) -> list[list[Event]]:
    served = SessionServed(session, name="m").start()
    requests = Requests(count)
    for i in range(count):
        body = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}
        served.submit(read_body("chat", body), requests.sink(i))
    assert requests.ended(20)
    served.close()
    return requests.events


def test_a_session_that_declares_four_serves_four_requests_at_once() -> None:
    events = _serve(_Meeting(4, declared=4), 4)
    assert all([e.kind for e in ev] == ["start", "delta", "end", "done"] for ev in events)
    assert sorted(ev[1].text for ev in events) == ["q0", "q1", "q2", "q3"]


def test_a_session_that_declares_one_serves_one_at_a_time() -> None:
    events = _serve(_Meeting(2, declared=1, timeout=1), 2)
    assert all(ev[-1].kind == "error" for ev in events)  # never two inside at once: the meeting broke


class _Held(Session):
    """Each request waits for ``go`` before it answers."""

    def __init__(self, declared: int) -> None:
        super().__init__(_MeetingEngine(), {}, None, Learned())
        self.declared, self.go, self.entered = declared, threading.Event(), threading.Event()

    def concurrent(self) -> int:
        return self.declared

    def stream(self, request: Request) -> Generator[Response, None, None]:
        self.entered.set()
        assert self.go.wait(20)
        yield Response(request.question or "", [], DecodeStats(1), "stop")


@pytest.mark.parametrize("declared", [1, 2])
def test_requests_still_waiting_when_the_server_stops_are_told_so(declared: int) -> None:
    """Closed while one request runs and others wait: the running one finishes, and every
    waiting one gets an error that says the server is shutting down, none is left hanging."""
    session = _Held(declared)
    served = SessionServed(session, name="m").start()
    requests = Requests(5)
    for i in range(5):
        body = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}
        served.submit(read_body("chat", body), requests.sink(i))
    assert session.entered.wait(10)
    closing = threading.Thread(target=served.close)
    closing.start()
    time.sleep(0.2)  # close has put its sign to stop behind the waiting requests
    session.go.set()
    closing.join(30)
    assert not closing.is_alive()
    ends = [requests.last(i) for i in range(5)]
    assert all(e is not None for e in ends)
    kinds = [e.kind for e in ends if e is not None]
    assert kinds.count("done") >= 1 and "error" in kinds
    errors = [e.error for e in ends if e is not None and e.kind == "error"]
    assert all("shutting down" in str(err) for err in errors)


def test_an_engine_that_writes_its_own_prompts_refuses_tools() -> None:
    """An engine that answers the chat's question prompts its models itself: tools would
    never reach them, so the request is refused before it is queued."""
    from coinfer.errors import ConfigError

    served = SessionServed(_Meeting(1, 1), name="m")
    tool = {"type": "function", "function": {"name": "f"}}
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}], "tools": [tool]}
    with pytest.raises(ConfigError, match="--engine meeting does not tell its model of tools"):
        served.check(read_body("chat", body))
    served.check(read_body("chat", {**body, "tool_choice": "none"}))
