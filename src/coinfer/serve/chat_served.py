"""A served ``ChatModel`` (a remote API, a scripted fake): the requests waiting go to
``chat_batch`` together, each answered in one piece (``serve.served``'s third kind).

Tools go to the model with the request, and the calls it returns come back apart from
its text (``Event.calls``): the model reads its own replies (an API returns calls; a
``LocalChat`` reads them as the server does), so nothing reads them again here."""

from __future__ import annotations

from collections import deque

from coinfer.chat.base import ChatModel
from coinfer.errors import CoinferError, ConfigError
from coinfer.serve.schemas import ServeRequest
from coinfer.serve.served import Event, Served, Ticket
from coinfer.serve.stops import StopScanner

__all__ = ["ChatServed"]


class ChatServed(Served):
    """Any ``ChatModel``: the requests waiting go to ``chat_batch`` together."""

    engine = "chat"
    reads_calls = True

    def __init__(
        self, model: ChatModel, *, name: str | None = None, max_batch: int = 8, max_queue: int = 64
    ) -> None:
        super().__init__(name or model.name, max_queue=max_queue, concurrency=max_batch)
        self.model, self.max_batch = model, max_batch

    def check(self, request: ServeRequest) -> None:
        if request.messages is None:
            raise ConfigError(f"{self.name} serves chat completions only", hint="POST /v1/chat/completions")

    def serve(self) -> None:
        pending: deque[Ticket] = deque()
        while True:
            arrived = self.take(block=not pending)
            if arrived is None:
                return
            pending.extend(arrived)
            batch = [pending.popleft() for _ in range(min(self.max_batch, len(pending)))]
            gone = [t for t in batch if t.cancelled.is_set()]
            for t in gone:
                self.failed(t, ConfigError("the client went away"))
            self._answer([t for t in batch if t not in gone])

    def _answer(self, batch: list[Ticket]) -> None:
        try:
            requests = [t.request.chat_request() for t in batch]
            results = self.model.chat_batch(requests)
        except CoinferError as exc:
            for t in batch:
                self.failed(t, exc)
            return
        for ticket, result in zip(batch, results, strict=True):
            ticket.sink(Event("start"))
            for i, (text, reason) in enumerate(zip(result.texts, result.finish_reasons, strict=True)):
                out, stopped = StopScanner(ticket.request.stop).push(text, final=True)
                called = not stopped and i < len(result.tool_calls)  # a stop string ends it before calls
                calls = result.tool_calls[i] if called else []
                ticket.sink(Event("delta", index=i, text=out))
                ticket.sink(Event("end", index=i, finish="stop" if stopped else reason, calls=calls))
            self.finished(ticket, result.usage)
