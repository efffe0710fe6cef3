"""Local–remote protocols as generators, and the driver that runs them.

A protocol (Minion, MinionS, the baselines) is a generator that *yields* what it needs
and receives the reply: a ``ChatCall`` (a batch of requests to the ``local`` or the
``remote`` model) gets the list of ``ChatResult``; a ``CodeRun`` (code the remote wrote)
gets the ``SandboxResult`` or the ``SandboxError``; a ``Note`` (something for the trace:
jobs made, abstentions) gets None. It returns a ``Finished``. The protocol holds no
sockets, threads or models, so the same flow runs against real models or scripted fakes
(this is how httpx writes its auth flows). ``run_protocol`` runs one against two chat
models, counts every call's usage per side and round in a ``UsageLedger``, times every
call and sandbox run (each trace entry's ``seconds``), and yields each trace entry as it
happens; ``drive`` runs it to its end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from coinfer import sandbox
from coinfer.chat.base import ChatModel, ChatRequest, ChatResult, Usage
from coinfer.chat.pricing import UsageLedger
from coinfer.errors import ConfigError, SandboxError

__all__ = ["ChatCall", "CodeRun", "Finished", "Note", "Run", "drive", "run_protocol"]

Side = Literal["local", "remote"]
JOB_API = Path(__file__).with_name("job_api.py")


@dataclass(frozen=True)
class ChatCall:
    """Requests for one side, answered together (the local side runs them concurrently)."""

    side: Side
    round: int
    purpose: str  # for the trace: "ask", "answer", "decompose", "jobs", "aggregate"…
    requests: list[ChatRequest]


@dataclass(frozen=True)
class CodeRun:
    """Code from the remote model to run in the sandbox over ``inputs`` (JSON data)."""

    round: int
    code: str
    inputs: Mapping[str, Any]


@dataclass(frozen=True)
class Note:
    """A fact for the trace (``kind``: what it is about; ``data``: JSON data)."""

    round: int
    kind: str
    data: Any


@dataclass(frozen=True)
class Finished:
    """What a protocol returns: its answer, the rounds it took, and whether the answer is a
    best effort after the remote broke the protocol (then ``problems`` says how)."""

    answer: str
    rounds: int
    best_effort: bool = False
    problems: list[str] = field(default_factory=list)


Step = ChatCall | CodeRun | Note
Protocol = Generator[Step, Any, Finished]


@dataclass
class Run:
    """A finished run: the protocol's result, the usage ledger and the trace."""

    protocol: str
    finished: Finished
    ledger: UsageLedger
    trace: list[dict[str, Any]]

    def usage(self, side: Side) -> Usage:
        return self.ledger.total(side)

    def seconds(self) -> dict[str, float]:
        """Wall seconds spent waiting on each side's calls and on the sandbox's runs (where
        a question's time went; calls made together count once)."""
        out = dict.fromkeys(("local", "remote", "sandbox"), 0.0)
        for entry in self.trace:
            if "seconds" in entry:
                where = entry.get("side", "sandbox")
                out[where] = round(out[where] + entry["seconds"], 3)
        return out


def run_protocol(
    name: str,
    protocol: Protocol,
    *,
    local: ChatModel | None,
    remote: ChatModel | None,
    sandbox_timeout_s: float = 10.0,
    sandbox_memory_mb: int = 512,
) -> Generator[dict[str, Any], None, Run]:
    """Run ``protocol`` to its end, yielding each trace entry as it happens; the ``Run``."""
    ledger, trace = UsageLedger(), list[dict[str, Any]]()
    reply: Any = None
    while True:
        try:
            step = protocol.send(reply)
        except StopIteration as stop:
            return Run(name, stop.value, ledger, trace)
        if isinstance(step, ChatCall):
            reply = _chat(step, local if step.side == "local" else remote, ledger, trace.append)
        elif isinstance(step, CodeRun):
            reply = _run_code(step, sandbox_timeout_s, sandbox_memory_mb, trace.append)
        else:
            trace.append({"round": step.round, "event": step.kind, "data": step.data})
            reply = None
        yield trace[-1]


def drive(
    name: str,
    protocol: Protocol,
    *,
    local: ChatModel | None,
    remote: ChatModel | None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> Run:
    """Run ``protocol`` to its end (default sandbox limits); ``on_event`` sees each trace
    entry as it happens."""
    steps: Iterator[dict[str, Any]] = run_protocol(name, protocol, local=local, remote=remote)
    while True:
        try:
            entry = next(steps)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        if on_event is not None:
            on_event(entry)


def _chat(
    call: ChatCall, model: ChatModel | None, ledger: UsageLedger, record: Callable[[dict[str, Any]], None]
) -> list[ChatResult]:
    if model is None:
        raise ConfigError(f"this protocol needs a {call.side} model")
    started = time.perf_counter()
    results = model.chat_batch(call.requests)
    seconds = time.perf_counter() - started
    usage = sum((r.usage for r in results), Usage())
    ledger.add(call.side, call.round, usage)
    record(
        {
            "round": call.round,
            "event": "chat",
            "side": call.side,
            "purpose": call.purpose,
            "requests": len(call.requests),
            "messages": [list(r.messages) for r in call.requests] if call.side == "remote" else None,
            "replies": [r.texts for r in results],
            "usage": usage.as_dict(),
            "seconds": round(seconds, 3),
        }
    )
    return results


def _run_code(
    run: CodeRun, timeout_s: float, memory_mb: int, record: Callable[[dict[str, Any]], None]
) -> sandbox.SandboxResult | SandboxError:
    """Run the remote's code in the sandbox; its trace entry says how it ended and the wall
    seconds it took (``elapsed_s``: the code's own, inside the sandbox)."""
    started = time.perf_counter()
    out: sandbox.SandboxResult | SandboxError
    entry: dict[str, Any] = {"round": run.round, "event": "code"}
    try:
        out = sandbox.run(
            run.code,
            run.inputs,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            modules={"minions": JOB_API.read_text()},
        )
        entry |= {"ok": True, "elapsed_s": round(out.elapsed_s, 3)}
    except SandboxError as exc:
        out = exc
        entry |= {"ok": False, "error": str(exc), "kind": exc.kind}
    record(entry | {"seconds": round(time.perf_counter() - started, 3)})
    return out
