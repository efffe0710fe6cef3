"""Minion (paper 000, §4 and appendix D.1): a free chat between the two models.

The remote model gets the question and never the documents; the local model gets the
documents in its system prompt. Each round the remote either asks the local model one
thing or gives the final answer (JSON ``{"decision": "ask", "message"}`` or
``{"decision": "final", "answer"}``); the local model answers from the documents. After
``max_rounds`` the remote is told to answer now. A remote reply that is not JSON is taken
as its message to the local model (this is a free chat), and at the forced end as its
answer, marked as a best effort.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from coinfer.chat.base import ChatRequest
from coinfer.engines.minions import prompts
from coinfer.engines.minions.parsing import json_object
from coinfer.engines.minions.protocol import ChatCall, Finished, Protocol
from coinfer.errors import ConfigError

__all__ = ["MinionConfig", "minion"]


@dataclass(frozen=True)
class MinionConfig:
    max_rounds: int = 4
    remote_max_tokens: int = 256
    local_max_tokens: int = 256

    def __post_init__(self) -> None:
        if self.max_rounds < 1 or self.remote_max_tokens < 1 or self.local_max_tokens < 1:
            raise ConfigError("Minion needs max_rounds, remote_max_tokens and local_max_tokens >= 1")


def minion(
    question: str, documents: Sequence[tuple[str, str]], config: MinionConfig = MinionConfig()
) -> Protocol:  # noqa: B008
    remote = [prompts.system(prompts.MINION_REMOTE), prompts.user(f"Question: {question}")]
    local = [prompts.system(prompts.MINION_LOCAL + prompts.documents_block(documents))]
    for rnd in range(1, config.max_rounds + 1):
        request = ChatRequest(remote, max_tokens=config.remote_max_tokens, json_schema=prompts.CHAT_SCHEMA)
        [reply] = yield ChatCall("remote", rnd, "ask", [request])
        turn = json_object(reply.text) or {}
        if turn.get("decision") == "final" and turn.get("answer"):
            return Finished(str(turn["answer"]), rnd)
        message = str(turn.get("message") or reply.text).strip()
        remote = [*remote, prompts.assistant(reply.text)]
        local = [*local, prompts.user(message)]
        [answer] = yield ChatCall(
            "local", rnd, "answer", [ChatRequest(local, max_tokens=config.local_max_tokens)]
        )
        local = [*local, prompts.assistant(answer.text)]
        remote = [*remote, prompts.user(f"Local model: {answer.text}")]
    request = ChatRequest(
        [*remote, prompts.user(prompts.MINION_LAST)],
        max_tokens=config.remote_max_tokens,
        json_schema=prompts.CHAT_SCHEMA,
    )
    [reply] = yield ChatCall("remote", config.max_rounds, "final", [request])
    turn = json_object(reply.text) or {}
    if turn.get("answer"):
        return Finished(str(turn["answer"]), config.max_rounds)
    problem = "the remote's last reply was not the JSON final answer; its text is taken as the answer"
    return Finished(reply.text.strip(), config.max_rounds, best_effort=True, problems=[problem])
