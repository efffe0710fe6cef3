"""The baselines of paper 000, as protocols in the same harness: one side reads everything.

``remote_only``: the remote model gets the whole documents and the question (the cost
every protocol is measured against). ``local_only``: the local model does the same, for
free. RAG lives in ``rag`` (it needs a retriever).
"""

from __future__ import annotations

from collections.abc import Sequence

from coinfer.engines.minions import prompts
from coinfer.engines.minions.protocol import ChatCall, Finished, Protocol, Side

__all__ = ["direct"]


def direct(
    question: str, documents: Sequence[tuple[str, str]], side: Side, *, max_tokens: int = 256
) -> Protocol:
    """One side answers from the full documents in one call."""
    [reply] = yield ChatCall(side, 1, "answer", [prompts.direct_request(question, documents, max_tokens)])
    return Finished(reply.text.strip(), 1)
