"""The baselines of paper 000, as protocols in the same harness: one side reads everything.

``remote_only``: the remote model gets the whole documents and the question (the cost
every protocol is measured against). ``local_only``: the local model does the same, for
free. RAG lives in ``rag`` (it needs a retriever).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coinfer.engines.minions import prompts
from coinfer.engines.minions.protocol import ChatCall, Finished, Protocol, Side
from coinfer.errors import ConfigError

__all__ = ["DirectConfig", "direct"]


@dataclass(frozen=True, kw_only=True)
class DirectConfig:
    """One side reads everything: ``remote`` (remote-only, the cost every protocol is
    measured against) or ``local`` (local-only)."""

    side: Side = "remote"
    max_tokens: int = 256

    def __post_init__(self) -> None:
        if self.side not in ("remote", "local") or self.max_tokens < 1:
            raise ConfigError(f"need side 'remote' or 'local' and max_tokens >= 1, got {self.side!r}")

    @property
    def name(self) -> str:
        return f"{self.side}-only"

    def protocol(self, question: str, documents: Sequence[tuple[str, str]]) -> Protocol:
        return direct(question, documents, self.side, max_tokens=self.max_tokens)


def direct(
    question: str, documents: Sequence[tuple[str, str]], side: Side, *, max_tokens: int = 256
) -> Protocol:
    """One side answers from the full documents in one call."""
    [reply] = yield ChatCall(side, 1, "answer", [prompts.direct_request(question, documents, max_tokens)])
    return Finished(reply.text.strip(), 1)
