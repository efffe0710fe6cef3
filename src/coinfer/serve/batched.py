"""Collective decoding served with continuous batching: requests join the engine's running
batch between rounds (``collective.Arrivals``) and leave it when done, when a stop string
ends them, or when their client goes away.

Requests share a batch when they sample alike (temperature, top_p, seed): the engine has
one sampling per run. A request that samples otherwise waits for the batch to drain and
starts the next one. Each request keeps its own token budget.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from coinfer.chat.base import Usage
from coinfer.decoding.response import Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.decoding.trace import TraceRecorder
from coinfer.errors import CoinferError, ConfigError
from coinfer.serve.schemas import ServeRequest
from coinfer.serve.served import Event, Served, Ticket, prompt_ids, sampling_of
from coinfer.serve.stops import StopScanner

__all__ = ["CollectiveServed"]


@dataclass
class _Running:
    ticket: Ticket
    prompt: list[int]
    scanner: StopScanner
    recorder: TraceRecorder
    produced: int = 0
    stopped: bool = False  # a stop string ended it: the engine is told to end it too
    last: Response | None = field(default=None, repr=False)


class CollectiveServed(Served):
    """Collective decoding over ``target`` with ``drafts`` voting; ``config``: the
    ``CollectiveConfig`` whose sampling and budget each batch replaces (no pipeline)."""

    engine = "collective"

    def __init__(
        self, target: Any, drafts: list[Any], config: Any, *, name: str, max_queue: int = 64
    ) -> None:
        super().__init__(name, max_queue=max_queue, concurrency=config.max_batch)
        self.model, self.drafts, self.config = target, drafts, config
        self.draft = ",".join(d.name for d in drafts)
        self._waiting: deque[Ticket] = deque()
        self._running: dict[int, _Running] = {}
        self._sampling: SamplingParams | None = None
        self._closing = False

    def check(self, request: ServeRequest) -> None:
        if request.n != 1:
            raise ConfigError("--engine collective serves one sample per request", hint="send n=1")
        if request.json_schema is not None:
            raise ConfigError(
                "--engine collective does not constrain replies to a schema", hint="serve --engine plain"
            )

    # ---- the worker ------------------------------------------------------------------
    def serve(self) -> None:
        from coinfer.engines.collective import stream

        while not self._closing:
            arrived = self.take(block=not self._waiting)
            if arrived is None:
                return
            self._waiting.extend(arrived)
            self._sampling = sampling_of(self._waiting[0].request)
            config = replace(self.config, sampling=self._sampling)
            try:
                for response in stream(self.model, [], drafts=self.drafts, config=config, arrivals=self):
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
                self.failed(ticket, CoinferError(f"{self.name} is shutting down"))
                continue
            admitted = self._admit(ticket)
            if admitted is not None:
                out.append(admitted)
        return out

    def _admit(self, ticket: Ticket) -> tuple[int, list[int], int] | None:
        r = ticket.request
        try:
            prompt = prompt_ids(self.model, r)
            room = self.model.n_ctx - len(prompt)
            if room < 1:
                raise ConfigError(
                    f"the prompt has {len(prompt)} tokens; {self.name}'s window holds {self.model.n_ctx}"
                )
        except CoinferError as exc:
            self.failed(ticket, exc)
            return None
        recorder = TraceRecorder(
            self.engine, model=self.name, draft=self.draft, detokenize=self.model.detokenize
        )
        self._running[ticket.number] = _Running(ticket, prompt, StopScanner(r.stop), recorder)
        ticket.sink(Event("start"))
        return ticket.number, prompt, min(r.max_tokens, room)

    def left(self) -> set[int]:
        return {k for k, run in self._running.items() if run.stopped or run.ticket.cancelled.is_set()}

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
