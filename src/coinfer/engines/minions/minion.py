"""Minion (paper 000, §4 and appendix D.1): a free chat between the two models.

The remote model gets the question and never the documents; the local model gets the
documents in its system prompt and the question with the remote's first message (so the
cached documents serve every question about them). The remote opens with a message to
the local model (it has nothing to answer from yet); then, each round, the local model
answers and the remote either asks one more thing or gives the final answer (JSON
``{"decision": "ask", "message"}`` or ``{"decision": "final", "answer"}``). After
``max_rounds`` answers the remote is told to answer now. A remote reply that is not JSON
is taken as its message to the local model (this is a free chat), and at the forced end
as its answer, marked as a best effort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from coinfer.chat.base import ChatRequest
from coinfer.engines.minions import prompts
from coinfer.engines.minions.parsing import json_object
from coinfer.engines.minions.protocol import ChatCall, Finished, Protocol
from coinfer.errors import ConfigError

__all__ = ["MinionConfig", "minion"]


@dataclass(frozen=True, kw_only=True)
class MinionConfig:
    """Minion's knobs: rounds of chat before the remote must answer, and reply budgets."""

    name: ClassVar[str] = "minion"
    max_rounds: int = 4
    remote_max_tokens: int = 256
    local_max_tokens: int = 256

    def __post_init__(self) -> None:
        if self.max_rounds < 1 or self.remote_max_tokens < 1 or self.local_max_tokens < 1:
            raise ConfigError(
                "Minion needs max_rounds, remote_max_tokens and local_max_tokens >= 1",
                hint="pass --max-rounds N with N >= 1",
            )

    def protocol(self, question: str, documents: Sequence[tuple[str, str]]) -> Protocol:
        return minion(question, documents, self)


def minion(
    question: str, documents: Sequence[tuple[str, str]], config: MinionConfig = MinionConfig()
) -> Protocol:  # noqa: B008
    opening = f"Question: {question}\n{prompts.MINION_FIRST}"
    remote = [prompts.system(prompts.MINION_REMOTE), prompts.user(opening)]
    local = [prompts.system(prompts.MINION_LOCAL + prompts.documents_block(documents))]
    [reply] = yield ChatCall("remote", 1, "open", [ChatRequest(remote, max_tokens=config.remote_max_tokens)])
    for rnd in range(1, config.max_rounds + 1):
        remote = [*remote, prompts.assistant(reply.text)]
        message = _message(reply.text)
        if rnd == 1:  # after the documents, so a second question about them reuses their cache
            message = prompts.MINION_LOCAL_FIRST.format(question=question, message=message)
        local = [*local, prompts.user(message)]
        [answer] = yield ChatCall(
            "local", rnd, "answer", [ChatRequest(local, max_tokens=config.local_max_tokens)]
        )
        local = [*local, prompts.assistant(answer.text)]
        last = rnd == config.max_rounds
        tail = prompts.MINION_LAST if last else prompts.MINION_TURN
        turn_text = f"Local model: {answer.text}\n\nQuestion: {question}\n{tail}"
        remote = [*remote, prompts.user(turn_text)]
        schema = prompts.FINAL_SCHEMA if last else prompts.CHAT_SCHEMA
        request = ChatRequest(remote, max_tokens=config.remote_max_tokens, json_schema=schema)
        [reply] = yield ChatCall("remote", rnd, "final" if last else "decide", [request])
        turn = json_object(reply.text) or {}
        if turn.get("answer") and (last or turn.get("decision") == "final"):
            return Finished(str(turn["answer"]), rnd)
    problem = "the remote's last reply was not the JSON final answer; its text is taken as the answer"
    return Finished(reply.text.strip(), config.max_rounds, best_effort=True, problems=[problem])


def _message(reply: str) -> str:
    """The remote's message to the local model: its JSON ``message`` or, failing that, its text."""
    turn = json_object(reply) or {}
    return str(turn.get("message") or reply).strip()
