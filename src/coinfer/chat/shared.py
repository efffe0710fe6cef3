"""One ``LocalChat``'s continuous batch shared by callers on several threads.

A protocol that answers several questions at once (MinionS, served to several clients)
runs each question on its own thread; each calls ``chat`` or ``chat_batch`` as if it had
the model to itself. ``SharedChat`` hands every call's requests to one worker thread that
owns the model: they join its running batch at the next step (``LocalChat.step``) and
the call returns when its own requests are done, so the jobs of different questions are
decoded in one forward per step and a call never waits for another's to finish first.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from coinfer.chat.base import ChatModel, ChatRequest, ChatResult
from coinfer.chat.local import LocalChat
from coinfer.errors import CoinferError, ModelError

__all__ = ["SharedChat", "drain", "leftovers"]

T = TypeVar("T")


def drain(inbox: queue.Queue[T | None], *, block: bool) -> list[T] | None:
    """Everything waiting in ``inbox`` (waiting for one item first when ``block``); None
    once a None, the sign to stop, is met (what came before it goes back into ``inbox``,
    for whoever stops to answer)."""
    out: list[T] = []
    try:
        item = inbox.get(block=block)
        while True:
            if item is None:
                for taken in out:
                    inbox.put(taken)
                return None
            out.append(item)
            item = inbox.get_nowait()
    except queue.Empty:
        return out


def leftovers(inbox: queue.Queue[T | None]) -> list[T]:
    """What is still in ``inbox`` once its worker has stopped (signs to stop left out)."""
    left: list[T] = []
    while True:
        try:
            item = inbox.get_nowait()
        except queue.Empty:
            return left
        if item is not None:
            left.append(item)


@dataclass
class _Call:
    """One caller's ``chat_batch``: its requests, then their jobs and answers."""

    requests: list[ChatRequest]
    jobs: list[Any] = field(default_factory=list)
    results: list[ChatResult] | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class SharedChat(ChatModel):
    """``chat``'s batch, taken from any thread (``close`` stops the worker; the wrapped
    chat is the caller's to close). A call in flight when it closes, or made after, gets
    a ``ModelError``; none waits for ever."""

    def __init__(self, chat: LocalChat) -> None:
        self.local, self.model, self.name = chat, chat.model, chat.name  # the batch every caller joins
        self.max_concurrent = chat.max_concurrent
        self._inbox: queue.Queue[_Call | None] = queue.Queue()
        self._closing = threading.Lock()  # a call goes in before the sign to stop, or not at all
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name=f"shared-{chat.name}", daemon=True)
        self._thread.start()

    def chat(self, request: ChatRequest) -> ChatResult:
        return self.chat_batch([request])[0]

    def chat_batch(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        call = _Call(list(requests))
        with self._closing:
            if self._closed or not self._thread.is_alive():
                raise ModelError(f"{self.name}'s shared batch has stopped", hint="open the model again")
            self._inbox.put(call)
        call.done.wait()
        if call.error is not None:
            raise call.error
        assert call.results is not None
        return call.results

    def close(self) -> None:
        with self._closing:
            self._closed = True
            self._inbox.put(None)
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    # ---- the worker ------------------------------------------------------------------
    def _serve(self) -> None:
        waiting: deque[Any] = deque()
        running: list[Any] = []
        calls: list[_Call] = []
        while True:
            arrived = drain(self._inbox, block=not (waiting or running))
            if arrived is None:
                closed = ModelError(f"{self.name} was closed while answering")
                self._fail([*calls, *leftovers(self._inbox)], closed)
                return
            for call in arrived:
                self._join(call, waiting, calls)
            try:
                running = self.local.step(waiting, running)
            except Exception as exc:  # noqa: BLE001 - every caller in flight learns why; the next start afresh
                self._fail(calls, exc)
                waiting.clear()
                running, calls = [], []
                continue
            calls = self._answer(calls)

    def _join(self, call: _Call, waiting: deque[Any], calls: list[_Call]) -> None:
        try:
            call.jobs = self.local.jobs_for(call.requests)
        except CoinferError as exc:  # this call's requests do not fit: it alone learns why
            call.error = exc
            call.done.set()
            return
        waiting.extend(call.jobs)
        calls.append(call)

    def _answer(self, calls: list[_Call]) -> list[_Call]:
        """Answer the calls whose jobs are all done; the rest, still in flight."""
        open_calls = []
        for call in calls:
            if all(job.finish is not None for job in call.jobs):  # each retired by its last step
                call.results = self.local.results(call.requests, call.jobs)
                call.done.set()
            else:
                open_calls.append(call)
        return open_calls

    def _fail(self, calls: list[_Call], error: BaseException) -> None:
        for call in calls:
            self.local.abandon(call.jobs)
            call.error = error
            call.done.set()
