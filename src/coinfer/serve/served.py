"""A served model: a named engine configuration that takes requests from the HTTP side and
answers each with a stream of events, on its own worker thread.

``submit(request, sink)`` queues a request (``ServerBusy`` past ``max_queue`` requests
waiting or running) and returns a ``Ticket`` whose ``cancel`` stops it (its client went
away: its cache is freed at the engine's next step). The worker calls ``sink`` with
``start`` (the request was read; or ``error``), then per sample ``delta`` events (text)
and one ``end`` (finish reason, the engine's ``DecodeStats`` and extras), then ``done``
(usage). ``sink`` must not block: the HTTP side hands each event to its event loop.

Three kinds:

* ``PlainServed``: a local model, continuous batching (``LocalChat.step``): a request
  joins the running batch at the next step and leaves it when done;
* ``SessionServed``: any engine's ``Session`` (``decoding.engine``), one request at a
  time (or ``session.concurrent()`` at once, each on its own thread), stopped between
  rounds when cancelled (``serve.batched.BatchServed``: a session
  that batches, requests joining its running batch);
* ``ChatServed`` (``serve.chat_served``): any ``ChatModel`` (a remote API, a scripted
  fake): queued requests go to ``chat_batch`` together, each answered in one piece.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from coinfer.chat.base import Usage
from coinfer.chat.shared import drain, leftovers
from coinfer.chat.tools import ToolCall
from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.engine import Request, Session
from coinfer.decoding.response import DecodeStats, Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.decoding.trace import TraceRecorder
from coinfer.errors import CoinferError, ConfigError, ModelError, TransportError
from coinfer.serve.schemas import ServeRequest
from coinfer.serve.stops import StopScanner

log = logging.getLogger(__name__)

__all__ = [
    "Event",
    "PlainServed",
    "Served",
    "ServerBusy",
    "ServerUnavailable",
    "SessionServed",
    "Ticket",
    "engine_request",
    "prompt_ids",
    "refuse_tools",
    "refuse_unprompted_tools",
    "refuse_what_one_sample_engines_cannot",
    "sampling_of",
]


class ServerBusy(CoinferError):
    """Too many requests waiting: answered 429 with ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message, hint=f"retry in {retry_after} s")
        self.retry_after = retry_after


LOSS_GRACE_S = 2.0  # how long a failure waits for a watched part's loss to be reported


class ServerUnavailable(CoinferError):
    """The model cannot serve: a part it cannot serve without is lost for good (a
    pipeline's device that died), or the server is shutting down. Answered 503, and
    ``/health`` says so, so a load balancer sends elsewhere."""


def _nothing_lost() -> str | None:
    return None


@dataclass
class Event:
    """What the worker tells the HTTP side about one request."""

    kind: str  # start | delta | end | done | error
    index: int = 0  # the sample
    text: str = ""
    finish: str | None = None
    stats: DecodeStats | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    usage: Usage | None = None
    error: CoinferError | None = None
    trace: dict[str, Any] | None = None  # on ``end``: the sample's trace (coinfer.decoding.trace)
    calls: list[ToolCall] | None = None  # on ``end``: the calls its model returned (``reads_calls``)


Sink = Callable[[Event], None]


@dataclass
class Ticket:
    """A queued request: ``cancel`` stops it."""

    request: ServeRequest
    sink: Sink
    number: int
    cancelled: threading.Event = field(default_factory=threading.Event)
    queued_at: float = field(default_factory=time.perf_counter)

    def cancel(self) -> None:
        self.cancelled.set()


class Served(ABC):
    """The queue, the worker thread and the bookkeeping every kind shares."""

    engine = "?"
    draft: str | None = None  # what drafts for it, as a trace names it
    reads_calls = False  # its model returns tool calls apart from text (each ``end``'s ``calls``)

    def engines(self) -> tuple[str, ...]:
        """The engines a request may choose here (``MODEL@ENGINE``), its own first."""
        return (self.engine,)

    def engine_of(self, request: ServeRequest) -> str:
        """The engine ``request`` runs on: the one its model name picks, else this one's."""
        chosen = (request.model or "").partition("@")[2]
        return chosen if chosen in self.engines() else self.engine

    def __init__(self, name: str, *, max_queue: int = 64, concurrency: int = 1) -> None:
        if max_queue < 1:
            raise ConfigError(f"max_queue must be >= 1, got {max_queue}")
        self.name, self.max_queue, self.concurrency = name, max_queue, concurrency
        self.inbox: queue.Queue[Ticket | None] = queue.Queue()
        self._lock = threading.Lock()
        self._open = 0  # requests submitted and not done
        self._numbers = 0
        self._seconds = 5.0  # a request's time, a moving average (for Retry-After)
        self._thread = threading.Thread(target=self._serve, name=f"serve-{name}", daemon=True)
        self._closed = False
        self.draining = False  # set by ``stop_taking``: new requests are refused, open ones go on
        # a line naming a part lost for good (its parts' watch, set by ``engines.served``), or None
        self.lost_part: Callable[[], str | None] = _nothing_lost

    # ---- the HTTP side -----------------------------------------------------------------
    def start(self) -> Served:
        self._thread.start()
        return self

    @property
    def depth(self) -> int:
        """Requests waiting or running."""
        return self._open

    def check(self, request: ServeRequest) -> None:  # noqa: B027 - most kinds serve every request
        """Refuse, before queueing, what this kind cannot serve (``ConfigError``)."""

    def submit(self, request: ServeRequest, sink: Sink) -> Ticket:
        self.check(request)
        if self.draining:
            raise self.shutting_down()
        lost = self.unavailable()
        if lost is not None:
            raise lost
        if not self._thread.is_alive():
            raise CoinferError(f"{self.name} stopped serving", hint="see the server's log; restart it")
        with self._lock:
            if self._open >= self.max_queue:
                waves = (self._open - self.max_queue + 1) / max(self.concurrency, 1)
                retry = min(60, max(1, math.ceil(self._seconds * waves)))
                raise ServerBusy(f"{self.name} has {self._open} requests waiting or running", retry)
            self._open += 1
            self._numbers += 1
            ticket = Ticket(request, sink, self._numbers)
        self.inbox.put(ticket)
        return ticket

    def stop_taking(self) -> None:
        """Refuse new requests (503, ``shutting_down``) and let the open ones finish: the
        first step of a graceful stop (``Server.stop``'s drain), before ``close``."""
        self.draining = True

    def close(self) -> None:
        self._closed = True
        self.inbox.put(None)
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if not self._thread.is_alive():  # what is still queued learns that it will not be served
            self.fail_all(self.shutting_down())
        self.release()

    def shutting_down(self) -> ServerUnavailable:
        """What a request that will not be served now is told (a 503)."""
        return ServerUnavailable(
            f"{self.name} is shutting down",
            hint="send the request to another replica, or again once this one is back",
        )

    def release(self) -> None:  # noqa: B027 - a kind that holds nothing frees nothing
        """Free what the kind holds (after its worker stopped)."""

    # ---- the worker --------------------------------------------------------------------
    def finished(self, ticket: Ticket, usage: Usage) -> None:
        """``done`` for ``ticket``: it leaves the queue."""
        seconds = time.perf_counter() - ticket.queued_at
        with self._lock:
            self._open -= 1
            self._seconds = 0.8 * self._seconds + 0.2 * seconds
        ticket.sink(Event("done", usage=usage))

    def unavailable(self) -> ServerUnavailable | None:
        """Why no request can be served any more (a part lost for good), or None."""
        why = self.lost_part()
        if why is None:
            return None
        return ServerUnavailable(
            f"{self.name} cannot serve: {why}",
            hint="restart the server; behind a load balancer the other replicas go on serving",
        )

    def failed(self, ticket: Ticket, error: CoinferError) -> None:
        """``ticket`` ends with ``error``, or with why the model cannot serve any more
        where a lost part is what failed it (a device named, not a broken connection)."""
        with self._lock:
            self._open -= 1
        ticket.sink(Event("error", error=self._attributed(error)))

    def _attributed(self, error: CoinferError) -> CoinferError:
        """``error``, or the lost part behind it. A peer's socket closes as its process
        exits, a moment before the OS reports the exit: where parts are watched, a failure
        of the model or its links waits up to ``LOSS_GRACE_S`` for the watch to name one."""
        lost = self.unavailable()
        if (
            lost is None
            and self.lost_part is not _nothing_lost
            and isinstance(error, (ModelError, TransportError))
        ):
            deadline = time.monotonic() + LOSS_GRACE_S
            while lost is None and time.monotonic() < deadline:
                time.sleep(0.05)
                lost = self.unavailable()
        return lost or error

    def take(self, *, block: bool) -> list[Ticket] | None:
        """Requests that arrived (waiting for one when ``block``); None once closed."""
        return drain(self.inbox, block=block)

    def _serve(self) -> None:
        try:
            self.serve()
        except BaseException as exc:  # noqa: BLE001 - every open request learns the worker stopped
            self.fail_all(as_coinfer_error(exc))

    @abstractmethod
    def serve(self) -> None:
        """The worker's loop, until ``take`` returns None."""

    def fail_all(self, error: CoinferError) -> None:  # noqa: B027 - kinds with requests in hand add them
        for ticket in leftovers(self.inbox):
            self.failed(ticket, error)


def as_coinfer_error(exc: BaseException) -> CoinferError:
    """What a client is told of a failure: a ``CoinferError`` as it is, anything else
    as the model's failure (logged with its traceback)."""
    if isinstance(exc, CoinferError):
        return exc
    log.error("the engine failed", exc_info=exc)
    return ModelError(f"the model failed: {type(exc).__name__}: {exc}")


def prompt_ids(model: Any, request: ServeRequest) -> list[int]:
    """A chat in the model's template (with the tools it may call), or a completion's
    prompt as plain text."""
    if request.messages is not None and request.tools is not None:
        return list(model.chat_prompt(request.messages, tools=request.tools.specs))
    if request.messages is not None:
        return list(model.chat_prompt(request.messages))
    return list(model.text_prompt(request.prompt or ""))


def sampling_of(request: ServeRequest) -> SamplingParams:
    """The request's sampling (``LocalChat.new_jobs`` seeds sample s with ``seed + s``)."""
    return SamplingParams(temperature=request.temperature, top_p=request.top_p, seed=request.seed)


@dataclass
class _Sample:
    """One sample of a request on its way out: its text so far, held back at stop strings."""

    scanner: StopScanner
    detok: IncrementalDetokenizer
    stats: DecodeStats
    recorder: TraceRecorder
    sent: int = 0  # tokens turned into text
    finish: str | None = None


class PlainServed(Served):
    """A ``LocalChat``'s model, continuously batched; with the session's ``speculator``
    (the speculative engine's), the requests draft inside the batch (greedy or sampling;
    not under a JSON schema's grammar)."""

    engine = "plain"

    def __init__(
        self,
        chat: Any,
        *,
        name: str | None = None,
        max_queue: int = 64,
        session: Session | None = None,
        on_release: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name or chat.name, max_queue=max_queue, concurrency=chat.max_concurrent)
        self.chat, self.session, self.on_release = chat, session, on_release
        self.model = chat.model
        if session is not None:
            self.engine, self.draft = session.engine.name, session.draft_label
            chat.speculator = session.speculator()
        self._active: dict[int, tuple[Ticket, list[Any], list[_Sample]]] = {}

    def engines(self) -> tuple[str, ...]:
        """With a speculator, a request may also decode plainly in the same batch
        (``MODEL@plain``): both engines share one loaded target and one batch."""
        if self.chat.speculator is not None and self.engine != "plain":
            return (self.engine, "plain")
        return (self.engine,)

    def release(self) -> None:
        if self.session is not None:
            self.session.close()
        if self.on_release is not None:
            self.on_release()  # the parts' owner closes the chat
        else:
            self.chat.close()

    def _admit(self, ticket: Ticket, waiting: deque[Any]) -> None:
        r = ticket.request
        try:
            prompt = prompt_ids(self.model, r)
            jobs = self.chat.new_jobs(
                ticket.number,
                prompt,
                n=r.n,
                max_tokens=r.max_tokens,
                params=sampling_of(r),
                json_schema=r.json_schema,
                speculate=self.engine_of(r) != "plain",
            )
        except CoinferError as exc:
            self.failed(ticket, exc)
            return
        samples = [
            _Sample(
                StopScanner(r.stop),
                IncrementalDetokenizer(self.model.detokenize),
                DecodeStats(len(prompt)),
                TraceRecorder(self.engine_of(r), model=self.name, draft=self.draft),
            )
            for _ in jobs
        ]
        waiting.extend(jobs)
        self._active[ticket.number] = (ticket, jobs, samples)
        ticket.sink(Event("start"))

    def serve(self) -> None:
        waiting: deque[Any] = deque()
        running: list[Any] = []
        while True:
            arrived = self.take(block=not (waiting or running))
            if arrived is None:
                return
            for ticket in arrived:
                self._admit(ticket, waiting)
            for ticket, jobs, _ in list(self._active.values()):
                if ticket.cancelled.is_set():
                    for job in jobs:
                        self.chat.cancel(job, waiting)
            running = self.chat.step(waiting, running)
            self._report()

    def _report(self) -> None:
        """New text per sample; ``end`` and ``done`` for what finished."""
        for number, (ticket, jobs, samples) in list(self._active.items()):
            for i, (job, sample) in enumerate(zip(jobs, samples, strict=True)):
                if sample.finish is not None:
                    continue
                new = job.tokens[sample.sent :]
                sample.sent = len(job.tokens)
                if new:
                    sample.stats.emitted(len(new))
                sample.stats.drafted, sample.stats.accepted = job.drafted, job.accepted
                sample.stats.cached_tokens = job.cached
                text = "".join(sample.detok.push(t) for t in new)
                if job.finish is not None:
                    text += sample.detok.flush()
                out, stopped = sample.scanner.push(text, final=job.finish is not None)
                if out:
                    ticket.sink(Event("delta", index=i, text=out))
                if stopped and job.finish is None:
                    self.chat.cancel(job, deque())
                finish = "stop" if stopped else job.finish
                if new or finish:
                    sample.recorder.add(Response(text, list(new), sample.stats.snapshot(), finish))
                if finish is not None:
                    sample.finish = finish
                    ticket.sink(Event("end", index=i, finish=finish, stats=sample.stats.snapshot(),
                                      trace=sample.recorder.finish()))  # fmt: skip
            if all(s.finish is not None for s in samples):
                del self._active[number]
                read, written = sum(len(j.prompt) for j in jobs), sum(len(j.tokens) for j in jobs)
                usage = Usage(read, written, 1, cached_tokens=sum(j.cached for j in jobs))
                self.finished(ticket, usage)

    def fail_all(self, error: CoinferError) -> None:
        for ticket, _, _ in self._active.values():
            self.failed(ticket, error)
        self._active.clear()
        super().fail_all(error)


def refuse_what_one_sample_engines_cannot(engine: str, request: ServeRequest) -> None:
    """An engine other than plain decoding's batch answers one sample, unconstrained."""
    if request.n != 1:
        raise ConfigError(f"--engine {engine} serves one sample per request", hint="send n=1")
    if request.tools is not None and request.tools.forces:
        raise ConfigError(
            f"--engine {engine} cannot force a tool call (tool_choice {request.tools.choice!r})",
            hint='send tool_choice "auto", or serve --engine plain or speculative',
        )
    if request.json_schema is not None:
        raise ConfigError(
            f"--engine {engine} does not constrain replies to a schema", hint="serve --engine plain"
        )


def refuse_tools(what: str, request: ServeRequest) -> None:
    """Tools are refused where no chat template of ours tells the model of them: it would
    answer in text where the client awaits a call."""
    if request.tools is not None:
        raise ConfigError(
            f"{what} does not tell its model of tools", hint='leave tools out, or send tool_choice "none"'
        )


def refuse_unprompted_tools(session: Session, request: ServeRequest) -> None:
    """Tools are refused where the engine writes its model's prompts itself (one that
    ``answers`` a question) or has no model of ours to prompt."""
    if session.model is None or session.answers:
        refuse_tools(f"--engine {session.engine.name}", request)


def engine_request(session: Session, r: ServeRequest) -> Request:
    """What the HTTP request asks of ``session``: the prompt in its model's format (for an
    engine that continues it), the question and system message (a chat's), the documents,
    the budget and the sampling."""
    prompt = prompt_ids(session.model, r) if session.model is not None and not session.answers else []
    window = session.window
    if prompt and window is not None and len(prompt) >= window:
        raise ConfigError(
            f"the prompt has {len(prompt)} tokens; {session.model.name}'s window holds {window}",
            hint="shorten the chat, or serve with a larger --ctx",
        )
    question = system = None
    if r.messages is not None:
        system = next((m["content"] for m in r.messages if m["role"] == "system"), None)
        question = r.question() if session.answers else None
    return Request(prompt=prompt, question=question, system=system, documents=tuple(r.documents or ()),
                   max_tokens=r.max_tokens, sampling=sampling_of(r))  # fmt: skip


class SessionServed(Served):
    """Any engine's ``Session``, one request at a time (``n`` = 1), or as many at once as
    ``session.concurrent()`` says, each on its own thread; stopped between its steps when
    cancelled. What the engine declares decides what it serves: an engine that
    ``answers`` takes chats (their last user message); one that ``needs_documents`` takes
    requests that bring them. The usage is what the session says it billed (a remote's),
    else the model's prompt and output tokens. ``on_release``: what to close when the
    server stops (the session itself is closed then)."""

    def __init__(
        self,
        session: Session,
        *,
        name: str,
        max_queue: int = 64,
        on_release: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name, max_queue=max_queue, concurrency=max(1, session.concurrent()))
        self.session, self.model, self.engine = session, session.model, session.engine.name
        self.draft, self.on_release = session.draft_label, on_release

    def check(self, request: ServeRequest) -> None:
        refuse_what_one_sample_engines_cannot(self.engine, request)
        refuse_unprompted_tools(self.session, request)
        if self.session.answers:
            if request.messages is None:
                raise ConfigError(f"--engine {self.engine} answers chats", hint="POST /v1/chat/completions")
            request.question()
        if self.session.engine.needs_documents and not request.documents:
            raise ConfigError(
                f"--engine {self.engine} reads the documents the request brings, and it brings none",
                hint='add "documents": [{"name": ..., "text": ...}] to the body (extra_body in openai)',
            )

    def release(self) -> None:
        self.session.close()
        if self.on_release is not None:
            self.on_release()

    def serve(self) -> None:
        if self.concurrency > 1:
            self._serve_concurrently()
            return
        while True:
            arrived = self.take(block=True)
            if arrived is None:
                return
            for i, ticket in enumerate(arrived):
                if self._closed:  # the rest are told, not dropped
                    for left in arrived[i:]:
                        self.failed(left, self.shutting_down())
                    return
                self._one(ticket)

    def _serve_concurrently(self) -> None:
        """Up to ``concurrency`` requests at once, each on a thread of its own (a session
        whose ``concurrent`` says its parts share their batch across threads)."""
        started: dict[Future[None], Ticket] = {}
        with ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"serve-{self.name}") as pool:
            while True:
                arrived = self.take(block=True)
                if arrived is None:
                    pool.shutdown(wait=True, cancel_futures=True)
                    for future, ticket in started.items():
                        if future.cancelled():  # never begun: told, not dropped
                            self.failed(ticket, self.shutting_down())
                    return
                started = {f: t for f, t in started.items() if not f.done()}
                for ticket in arrived:
                    started[pool.submit(self._one, ticket)] = ticket

    def _one(self, ticket: Ticket) -> None:
        r = ticket.request
        if ticket.cancelled.is_set():
            self.failed(ticket, ConfigError("the client went away"))
            return
        try:
            request = engine_request(self.session, r)
            steps = self.session.stream(request)
        except Exception as exc:  # noqa: BLE001 - this request learns why; the next is served
            self.failed(ticket, as_coinfer_error(exc))
            return
        ticket.sink(Event("start"))
        scanner, last, finish, produced = StopScanner(r.stop), None, None, 0
        detokenize = self.model.detokenize if self.model is not None else None
        recorder = TraceRecorder(self.engine, model=self.name, draft=self.draft, detokenize=detokenize)
        try:
            for last in steps:
                recorder.add(last)
                produced += len(last.tokens)
                out, stopped = scanner.push(last.text, final=last.finish_reason is not None)
                if out:
                    ticket.sink(Event("delta", text=out))
                if stopped or ticket.cancelled.is_set():
                    finish = "stop" if stopped else "cancelled"
                    break
                finish = last.finish_reason
        except Exception as exc:  # noqa: BLE001 - this request learns why; the next is served
            self.failed(ticket, as_coinfer_error(exc))
            return
        finally:
            steps.close()
        prompt = request.prompt
        stats = last.stats if last is not None else DecodeStats(len(prompt))
        # a protocol's whole exchange stays in the trace, out of the answer
        extras = {k: v for k, v in (last.extras if last is not None else {}).items() if k != "trace"}
        trace = recorder.finish(finish_reason=finish or "length")
        ticket.sink(Event("end", finish=finish or "length", stats=stats, extras=extras, trace=trace))
        billed = self.session.billed(last) if last is not None else None
        usage = Usage(**billed) if billed else Usage(len(prompt) or stats.prompt_tokens, produced, 1)
        self.finished(ticket, usage)
