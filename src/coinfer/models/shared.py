"""One model shared by the threads of requests served at once, their forwards merged.

An engine that serves several requests at once runs each on its own thread (LLMCad's
rounds, DRAGON's peers), and each thread calls the model as if it were alone. A
``SharedModel`` stands in for the model on every thread: the calls that touch the model
take turns (a llama.cpp context is not safe to share between threads), and the forwards
that threads ask for while another forward runs are decoded together in the next one
(``extend_batch``: one batch of every request's rows, as a continuous batch's step is).
This is group commit, as a database's log does it: whoever takes the model runs
everything queued by then. A forward waits for company only as long as a step's
stragglers take: as many calls as the last batch merged (each request's Python between
two forwards), at most ``WINDOW`` of the last batch's seconds; a request alone never waits.

The results are what each thread would get alone (within the rounding a batch's shape
brings); should a merged forward fail, each request's forward runs again alone, so the
error reaches only the request it belongs to.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from coinfer.errors import ModelError
from coinfer.models.base import CheckedForward, Forward, Seq, SteerableModel, TokenConstraint
from coinfer.models.chat_template import Message
from coinfer.models.tree import TokenTree

__all__ = ["WINDOW", "Batch", "SharedModel"]

WINDOW = 0.2  # the most a forward waits for the last batch's company, in its seconds


@dataclass(frozen=True)
class Batch:
    """The forward a thread's call ran in: how many ``requests`` (threads' calls) it
    merged, its ``tokens`` (every request's rows) and the ``seconds`` it took. What a
    step of a batch costs, whatever its requests: a draft-length policy prices a draft
    by it, not by its own rows alone."""

    requests: int
    tokens: int
    seconds: float


class _Job:
    """One thread's forwards and, once run, their results or error and the batch."""

    def __init__(self, forwards: list[Forward]) -> None:
        self.forwards = forwards
        self.done = False
        self.result: list[np.ndarray] = []
        self.error: BaseException | None = None
        self.batch = Batch(1, sum(len(f.ids) for f in forwards), 0.0)

    def outcome(self) -> list[np.ndarray]:
        if self.error is not None:
            raise self.error
        return self.result


class SharedModel(SteerableModel):
    """``model`` for every thread at once; ``merged`` counts the requests' forwards that
    ran in a batch with another's, ``batches`` the forwards run. It does not own
    ``model``: closing it leaves the model open."""

    def __init__(self, model: SteerableModel) -> None:  # no super().__init__: the state is model's
        self.model = model
        self._lock = threading.Lock()  # the model's: whoever holds it may call it
        self._queue_lock = threading.Lock()
        self._arrived = threading.Condition(self._queue_lock)
        self._queue: list[_Job] = []
        self._company, self._step_s = 1, 0.0  # the last batch's calls and seconds
        self._mine = threading.local()  # each thread's latest Batch
        self.batches = self.merged = 0

    # ---- what is the model's -----------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name == "model":  # not set yet (copied or unpickled): no recursion
            raise AttributeError(name)
        return getattr(self.model, name)

    name = property(lambda self: self.model.name)  # type: ignore[assignment]
    backend = property(lambda self: self.model.backend)  # type: ignore[assignment]
    vocab_size = property(lambda self: self.model.vocab_size)  # type: ignore[assignment]
    n_ctx = property(lambda self: self.model.n_ctx)  # type: ignore[assignment]
    kv_cells_shared = property(lambda self: self.model.kv_cells_shared)  # type: ignore[assignment]
    max_sequences = property(lambda self: self.model.max_sequences)  # type: ignore[assignment]
    weights_file = property(lambda self: self.model.weights_file)  # type: ignore[assignment]
    template = property(lambda self: self.model.template)  # type: ignore[assignment]
    eos_ids = property(lambda self: self.model.eos_ids)  # type: ignore[assignment]
    clock = property(lambda self: self.model.clock)  # type: ignore[assignment]

    @property  # type: ignore[override]
    def layer_listener(self) -> Callable[[int], None] | None:
        return self.model.layer_listener

    @layer_listener.setter
    def layer_listener(self, listener: Callable[[int], None] | None) -> None:
        self.model.layer_listener = listener

    def tokenize(self, text: str, *, special: bool = False, add_bos: bool = False) -> list[int]:
        return self.model.tokenize(text, special=special, add_bos=add_bos)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.model.detokenize(ids)

    def chat_prompt(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        return self.model.chat_prompt(messages, add_generation_prompt=add_generation_prompt, tools=tools)

    def text_prompt(self, text: str) -> list[int]:
        return self.model.text_prompt(text)

    def user_prompt(self, text: str, *, system: str | None = None) -> list[int]:
        return self.model.user_prompt(text, system=system)

    # ---- the calls that take turns ------------------------------------------------------
    def _turn(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return call(*args, **kwargs)

    def new_sequence(self) -> Seq:
        return self._turn(self.model.new_sequence)  # type: ignore[no-any-return]

    def fork(self, seq: Seq) -> Seq:
        return self._turn(self.model.fork, seq)  # type: ignore[no-any-return]

    def park(self, seq: Seq) -> Seq:
        return self._turn(self.model.park, seq)  # type: ignore[no-any-return]

    def pack(self, seq: Seq) -> Seq:
        return self._turn(self.model.pack, seq)  # type: ignore[no-any-return]

    def packed(self, seqs: Sequence[Seq]) -> list[Seq]:
        return self._turn(self.model.packed, seqs)  # type: ignore[no-any-return]

    def commit_path(self, seq: Seq, nodes: Sequence[int]) -> None:
        self._turn(self.model.commit_path, seq, nodes)

    def truncate(self, seq: Seq, length: int) -> None:
        self._turn(self.model.truncate, seq, length)

    def release(self, seq: Seq) -> None:
        self._turn(self.model.release, seq)

    @property
    def live_sequences(self) -> int:
        return self.model.live_sequences

    def set_threads(self, n: int) -> int | None:
        return self._turn(self.model.set_threads, n)  # type: ignore[no-any-return]

    def json_constraint(self, schema: Mapping[str, Any]) -> TokenConstraint | None:
        return self._turn(self.model.json_constraint, schema)  # type: ignore[no-any-return]

    def last_hidden(self) -> np.ndarray:
        raise ModelError(
            f"{self.model.name} is shared by requests served at once: its last hidden states "
            "may be another request's",
            hint="serve engines that read hidden states one request at a time",
        )

    def close(self) -> None:
        """Nothing: the model is its owner's to close."""

    # ---- the forwards, merged -----------------------------------------------------------
    def extend_batch(self, forwards: Sequence[Forward]) -> list[np.ndarray]:
        job = _Job(list(forwards))
        with self._arrived:
            self._queue.append(job)
            self._arrived.notify_all()
            company = self._company
            self._arrived.wait_for(lambda: job.done or len(self._queue) >= company, WINDOW * self._step_s)
        with self._lock:
            if not job.done:  # nobody ran it yet: run it, and everything queued with it
                with self._arrived:
                    jobs, self._queue = self._queue, []
                self._run(jobs)
                with self._arrived:
                    self._company, self._step_s = len(jobs), jobs[0].batch.seconds
                    self._arrived.notify_all()
        self._mine.batch = job.batch
        return job.outcome()

    def last_batch(self) -> Batch | None:
        """The forward this thread's latest call ran in (None before its first)."""
        return getattr(self._mine, "batch", None)

    def _run(self, jobs: list[_Job]) -> None:
        """Every job's forwards in one ``extend_batch``; if that fails, each job alone."""
        self.batches += 1
        if len(jobs) > 1:
            self.merged += len(jobs)
            t0 = time.perf_counter()
            try:
                out = self.model.extend_batch([f for job in jobs for f in job.forwards])
            except Exception:  # noqa: BLE001  (each job again alone: the error is one job's)
                self.batches += len(jobs)
            else:
                batch = Batch(len(jobs), sum(j.batch.tokens for j in jobs), time.perf_counter() - t0)
                at = 0
                for job in jobs:
                    job.result, job.batch, job.done = out[at : at + len(job.forwards)], batch, True
                    at += len(job.forwards)
                return
        for job in jobs:
            t0 = time.perf_counter()
            try:
                job.result = self.model.extend_batch(job.forwards)
            except BaseException as exc:  # noqa: BLE001  (handed to the job's own thread)
                job.error = exc
            job.batch = Batch(1, job.batch.tokens, time.perf_counter() - t0)
            job.done = True

    def extend(
        self, seq: Seq, ids: Sequence[int], *, parents: Sequence[int] | None = None, last_only: bool = False
    ) -> np.ndarray:
        return self.extend_batch([Forward(seq, ids, parents=parents, last_only=last_only)])[0]

    def extend_greedy(
        self, seq: Seq, ids: Sequence[int], *, parents: Sequence[int] | None = None
    ) -> np.ndarray:
        return self.extend_batch([Forward(seq, ids, parents=parents, greedy=True)])[0]

    def extend_many(
        self, items: Sequence[tuple[Seq, Sequence[int]]], *, last_only: bool = False
    ) -> list[np.ndarray]:
        return self.extend_batch([Forward(seq, ids, last_only=last_only) for seq, ids in items])

    def extend_many_greedy(self, items: Sequence[tuple[Seq, Sequence[int]]]) -> np.ndarray:
        out = self.extend_batch([Forward(seq, ids, last_only=True, greedy=True) for seq, ids in items])
        return np.array([int(o[-1]) for o in out], dtype=np.int64)

    def extend_many_choices(self, items: Sequence[tuple[Seq, Sequence[int]]]) -> list[np.ndarray]:
        return self.extend_batch([Forward(seq, ids, greedy=True) for seq, ids in items])

    def extend_many_next(
        self, items: Sequence[tuple[Seq, Sequence[int]]], logits_for: Sequence[bool]
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        want = [bool(w) for w in logits_for]
        pairs = list(zip(items, want, strict=True))
        out = self.extend_batch([Forward(seq, ids, last_only=True, greedy=not w) for (seq, ids), w in pairs])
        lasts = [o[-1] for o in out]
        choices = [int(np.argmax(last)) if w else int(last) for last, w in zip(lasts, want, strict=True)]
        logits = [last if w else None for last, w in zip(lasts, want, strict=True)]
        return np.array(choices, dtype=np.int64), logits

    # ---- never called: every public call above goes to the model ------------------------
    def _extend(self, seq: Seq, ids: list[int], tree: TokenTree | None, last_only: bool) -> np.ndarray:
        raise NotImplementedError

    def _extend_batch(self, forwards: list[CheckedForward]) -> list[np.ndarray]:
        raise NotImplementedError

    def _fork(self, source: Seq, new: Seq) -> None:
        raise NotImplementedError

    def _commit_path(self, seq: Seq, path: list[int]) -> None:
        raise NotImplementedError

    def _truncate(self, seq: Seq, length: int) -> None:
        raise NotImplementedError

    def _release(self, seq: Seq) -> None:
        raise NotImplementedError
