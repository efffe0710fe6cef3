"""The local–remote protocols on the engine convention.

``stream(question, documents, local=…, remote=…, config=…)`` runs the protocol the
config names (``MinionsConfig``: MinionS, ``MinionConfig``: Minion, ``RagConfig``: RAG,
``DirectConfig``: remote-only or local-only) and yields a ``Response`` for every step: an
empty one whose ``extras["event"]`` is the step's trace entry (a chat call with its
tokens, a sandbox run, jobs made, abstentions), then the answer, with ``finish_reason``
``stop`` and in ``extras`` the protocol, rounds, whether it is a best effort (and why),
usage per side and per round, and the whole trace. ``generate`` returns the last one.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import Any, Protocol

from coinfer.chat.base import ChatModel
from coinfer.decoding.response import DecodeStats, Response
from coinfer.engines.minions import protocol as steps
from coinfer.engines.minions.minions import MinionsConfig
from coinfer.errors import ConfigError

__all__ = ["ProtocolConfig", "generate", "stream"]


class ProtocolConfig(Protocol):
    """What every protocol's config has: its name, and the protocol for a question."""

    @property
    def name(self) -> str: ...

    def protocol(self, question: str, documents: Sequence[tuple[str, str]]) -> steps.Protocol: ...


def stream(
    question: str,
    documents: Sequence[tuple[str, str]],
    *,
    local: ChatModel | None,
    remote: ChatModel | None,
    config: ProtocolConfig = MinionsConfig(),  # noqa: B008 (frozen)
) -> Generator[Response, None, None]:
    """A response per protocol step, then the answer (see the module). ``documents``:
    ``(name, text)`` pairs; the remote never sees their text (except remote-only). Code
    the remote writes runs in the sandbox with ``run_protocol``'s default limits."""
    if not question.strip():
        raise ConfigError("the question is empty", hint="ask something about the documents")
    if not documents:
        raise ConfigError("no document given", hint="pass at least one (name, text) document")
    stats = DecodeStats()
    run_steps = steps.run_protocol(
        config.name, config.protocol(question, documents), local=local, remote=remote
    )
    while True:
        try:
            entry = next(run_steps)
        except StopIteration as stop:
            run: steps.Run = stop.value
            break
        yield Response("", [], stats.snapshot(), extras={"event": entry})
    answer = run.finished.answer
    tokens = answer_tokens(answer, local)
    counted(stats, run, len(tokens))
    yield Response(answer, tokens, stats, "stop", extras=run_extras(run))


def answer_tokens(answer: str, local: ChatModel | None) -> list[int]:
    """The answer in the local model's tokens, where the local chat wraps a model that
    tokenizes (a client counting tokens sees a count); none for a chat API's text."""
    model: Any = getattr(local, "model", None)
    return list(model.tokenize(answer)) if answer and hasattr(model, "tokenize") else []


def counted(stats: DecodeStats, run: steps.Run, n_tokens: int) -> None:
    """A finished run's counts: its rounds, the tokens every model read (both sides'
    prompts), the answer's tokens, and in ``by_side`` each side's usage and the seconds its
    calls took."""
    stats.rounds = run.finished.rounds
    sides = {side: run.usage(side) for side in ("local", "remote")}  # type: ignore[arg-type]
    seconds = run.seconds()
    stats.prompt_tokens = sum(u.prompt_tokens for u in sides.values())
    stats.by_side = {side: {**u.as_dict(), "seconds": seconds[side]} for side, u in sides.items()}
    stats.emitted(n_tokens)
    stats.first_token_at = stats.first_token_at or time.perf_counter()
    stats.last_token_at = stats.last_token_at or stats.first_token_at


def generate(
    question: str,
    documents: Sequence[tuple[str, str]],
    *,
    local: ChatModel | None,
    remote: ChatModel | None,
    config: ProtocolConfig = MinionsConfig(),  # noqa: B008 (frozen)
) -> Response:
    """Run the protocol to its end: the answer's ``Response`` (see the module)."""
    *_, last = stream(question, documents, local=local, remote=remote, config=config)
    return last


def run_extras(run: steps.Run) -> dict[str, Any]:
    """A finished run as JSON data: protocol, rounds, best effort, usage, the seconds
    spent on each side and in the sandbox, trace."""
    usage = {side: run.usage(side).as_dict() for side in ("remote", "local")}  # type: ignore[arg-type]
    by_round = {
        side: {str(r): u.as_dict() for r, u in sorted(run.ledger.by_round(side).items())}
        for side in ("remote", "local")
    }
    return {
        "protocol": run.protocol,
        "rounds": run.finished.rounds,
        "best_effort": run.finished.best_effort,
        "problems": list(run.finished.problems),
        "usage": {**usage, "by_round": by_round},
        "seconds": run.seconds(),
        "trace": run.trace,
    }
