"""Any engine whose session batches (``decoding.engine.BatchSession``) served with
continuous batching: requests join its running batch between rounds (``Arrivals``) and
leave it when done, when a stop string ends them, or when their client goes away.

Requests share a batch when they sample alike (temperature, top_p, seed): the engine has
one sampling per run. A request that samples otherwise waits for the batch to drain and
starts the next one. Each request keeps its own token budget.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from coinfer.chat.base import Usage
from coinfer.decoding.engine import BatchSession
from coinfer.decoding.response import Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.decoding.trace import TraceRecorder
from coinfer.errors import CoinferError
from coinfer.serve.schemas import ServeRequest
from coinfer.serve.served import (
    Event,
    Served,
    Ticket,
    engine_request,
    refuse_unprompted_tools,
    refuse_what_one_sample_engines_cannot,
    sampling_of,
)
from coinfer.serve.stops import StopScanner

__all__ = ["BatchServed"]


@dataclass
class _Running:
    ticket: Ticket
    prompt: list[int]
    scanner: StopScanner
    recorder: TraceRecorder
    produced: int = 0
    stopped: bool = False  # a stop string ended it: the engine is told to end it too
    last: Response | None = field(default=None, repr=False)


class BatchServed(Served):
    """A batching session's engine: one running batch at a time (``session.run``) whose
    sampling is its first request's; ``on_release``: what to close when the server stops."""

    def __init__(
        self,
        session: BatchSession,
        *,
        name: str,
        max_queue: int = 64,
        on_release: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name, max_queue=max_queue, concurrency=getattr(session.config, "max_batch", 1))
        self.session, self.model, self.engine = session, session.model, session.engine.name
        self.draft, self.on_release = session.draft_label, on_release
        self._waiting: deque[Ticket] = deque()
        self._running: dict[int, _Running] = {}
        self._sampling: SamplingParams | None = None
        self._closing = False

    def check(self, request: ServeRequest) -> None:
        refuse_what_one_sample_engines_cannot(self.engine, request)
        refuse_unprompted_tools(self.session, request)

    def release(self) -> None:
        self.session.close()
        if self.on_release is not None:
            self.on_release()

    # ---- the worker ------------------------------------------------------------------
    def serve(self) -> None:
        while not self._closing:
            arrived = self.take(block=not self._waiting)
            if arrived is None:
                return
            self._waiting.extend(arrived)
            self._sampling = sampling_of(self._waiting[0].request)
            try:
                for response in self.session.run(self, self._sampling):
                    self._step(response)
            except CoinferError as exc:  # this batch's requests learn why; the next batch starts afresh
                for run in list(self._running.values()):
                    self.failed(run.ticket, exc)
                self._running.clear()

    def joined(self) -> list[tuple[int, list[int], int]]:
        """The waiting requests that sample as this batch does, prompts read and checked."""
        arrived = self.take(block=False)
        if arrived is None:
            self._closing = True  # the running ones finish; no new one joins
        else:
            self._waiting.extend(arrived)
        out = []
        for ticket in [t for t in self._waiting if sampling_of(t.request) == self._sampling]:
            self._waiting.remove(ticket)
            if self._closing:
                self.failed(ticket, self.shutting_down())
                continue
            admitted = self._admit(ticket)
            if admitted is not None:
                out.append(admitted)
        return out

    def _admit(self, ticket: Ticket) -> tuple[int, list[int], int] | None:
        r = ticket.request
        try:
            prompt = list(engine_request(self.session, r).prompt)  # checked against the window
        except CoinferError as exc:
            self.failed(ticket, exc)
            return None
        window = self.session.window  # the prompt is shorter than it (engine_request)
        room = r.max_tokens if window is None else window - len(prompt)
        recorder = TraceRecorder(
            self.engine, model=self.name, draft=self.draft, detokenize=self.model.detokenize
        )
        self._running[ticket.number] = _Running(ticket, prompt, StopScanner(r.stop), recorder)
        ticket.sink(Event("start"))
        return ticket.number, prompt, min(r.max_tokens, room)

    def left(self) -> set[int]:
        """Requests to end: a stop string ended them (the engine's last response ends them
        here), or their client went away (ended here now: an engine need not answer a
        request it drops, such as one still waiting for its place in the batch)."""
        gone = {k for k, run in self._running.items() if run.stopped or run.ticket.cancelled.is_set()}
        for key in gone:
            run = self._running[key]
            if not run.stopped:
                self._end(run, "cancelled")
        return gone

    def _step(self, response: Response) -> None:
        run = self._running.get(response.request)
        if run is None:
            return
        run.recorder.add(response)
        run.last = response
        run.produced += len(response.tokens)
        final = response.finish_reason is not None
        if not run.stopped:
            out, stopped = run.scanner.push(response.text, final=final)
            if out:
                run.ticket.sink(Event("delta", text=out))
            run.stopped = stopped
        if final:
            self._end(run, "stop" if run.stopped else str(response.finish_reason))

    def _end(self, run: _Running, finish: str) -> None:
        del self._running[run.ticket.number]
        last = run.last
        stats = last.stats if last is not None else None
        trace = run.recorder.finish(finish_reason=finish)
        extras = dict(last.extras) if last is not None else {}
        run.ticket.sink(Event("end", finish=finish, stats=stats, extras=extras, trace=trace))
        self.finished(run.ticket, Usage(len(run.prompt), run.produced, 1))

    def fail_all(self, error: CoinferError) -> None:
        for run in list(self._running.values()):
            self.failed(run.ticket, error)
        self._running.clear()
        while self._waiting:
            self.failed(self._waiting.popleft(), error)
        super().fail_all(error)
