"""The fake of the ``ChatModel`` contract: replies from a script, every request recorded."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from coinfer.chat.base import ChatModel, ChatRequest, ChatResult, Usage

__all__ = ["ScriptedChat"]


class ScriptedChat(ChatModel):
    """A ``ChatModel`` whose replies come from a function of the request or a list, in order.

    ``requests`` records every request; ``batches`` the size of every ``chat_batch``.
    Usage is counted as one token per word, so protocols' accounting can be checked. Given
    tools, a reply written as calls is read as them, as ``LocalChat`` reads a model's.
    """

    def __init__(
        self, reply: Callable[[ChatRequest], str] | Iterable[str], *, name: str = "scripted"
    ) -> None:
        self.name = name
        self._from_request = reply if callable(reply) else None
        self._queue = None if callable(reply) else iter(reply)
        self.requests: list[ChatRequest] = []
        self.batches: list[int] = []

    def _one(self, request: ChatRequest) -> str:
        if self._from_request is not None:
            return self._from_request(request)
        assert self._queue is not None
        return next(self._queue)

    def chat(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        texts = [self._one(request) for _ in range(request.n)]
        prompt = sum(len(str(m["content"]).split()) for m in request.messages)
        usage = Usage(prompt, sum(len(t.split()) for t in texts), 1)
        return ChatResult.read(texts, ["stop"] * len(texts), usage, request.tools)  # a reply may be calls

    def chat_batch(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        self.batches.append(len(requests))
        return [self.chat(r) for r in requests]
