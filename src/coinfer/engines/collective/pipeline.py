"""The speculative generation pipeline (paper 001, §3.4): drafting and verifying at once,
where that pays.

The drafters run on a drafter thread, the target on the calling thread; they meet
in the *intermediate result pool* of drafted requests. The target takes up to ``b``
requests from the pool per verification (``b``: half the running requests, so that two
groups alternate, one drafted while the other is verified; 1 for a single request). The
drafter pauses while the pool holds ``b`` requests and resumes as it drains, so drafts
never pile up ahead of the target.

With few requests there is nothing to draft while the target verifies them all. Then
the drafter *pre-drafts*: for a request under verification it drafts the next round as if
the target keeps the whole voted draft and then picks the voted source's next token. If
the target does exactly that, the pre-draft goes to the pool the moment verification
ends; if not, it is thrown away and the request drafted afresh. Pre-drafts cost only the
drafter's otherwise idle time.

On a CPU the overlap costs cores: each model computes with its own thread count
(``set_threads``), and while pipelined the drafts get ``draft_threads``, on the drafter
thread pinned to their own cores where the system allows, and the target the rest.
Whether that pays is measured (``switch.PipelineSwitch``): the run alternates *phases*,
pipelined ones (a drafter thread for the phase) and sequential ones (no drafter thread;
drafting, then verifying, each with every core), and runs the pipeline only while a
draft model drafts (the gate has one on) and its measured throughput beats sequential
rounds'. Sequential rounds price and split the target's forwards by what the sequential
engine learned on the target (its cost curve and split judge); pipelined phases, on
fewer cores, by their own. So a pipeline that steps aside decodes as the sequential
engine does (run M at batch 8, ``docs/bench/collective``: stepped aside for every round
but pricing by a curve of its own, started empty in each run, it priced qa at 0.941 of
plain decoding, where the same engine without the pipeline priced 1.002).
A draft model must not be the target itself (one llama.cpp context cannot run on two
threads).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from coinfer.decoding.draft_length import CostCurve
from coinfer.decoding.drafters import Drafter
from coinfer.decoding.split import split_judge
from coinfer.engines.collective.gate import SourceGate
from coinfer.engines.collective.rounds import Feedback, Request, Session, Voted
from coinfer.engines.collective.switch import PipelineSwitch
from coinfer.errors import ConfigError
from coinfer.models.base import SteerableModel

__all__ = ["CoreSplit", "run_pipelined"]


class _Pool:
    """The state both threads share, behind one condition variable."""

    def __init__(self) -> None:
        self.cv = threading.Condition()
        self.todo: deque[Request] = deque()  # settled requests that need a draft
        self.ready: deque[tuple[Request, Voted]] = deque()  # the intermediate result pool
        self.in_flight: dict[int, tuple[Request, Voted]] = {}  # under verification
        self.drafting: set[int] = set()  # keys the drafter is drafting or pre-drafting for
        self.predrafts: dict[int, tuple[list[int], Voted]] = {}  # key -> (assumed context, draft)
        self.forget: list[int] = []
        self.feedback: list[Feedback] = []  # for the drafters, delivered on the drafter thread
        self.batch = 1  # b: requests per verification
        self.stop = False
        self.error: BaseException | None = None
        self.pin: Callable[[], object] = lambda: None  # pins the drafter thread to its cores


def run_pipelined(session: Session, prompts: Sequence[list[int]]) -> Iterator[list[Request]]:
    """Generate for every prompt, pipelined where that pays and in sequential rounds
    elsewhere; yield the requests each step advanced."""
    target, learner = session.target, session.learner
    if any(d.model is target for d in session.drafts):
        raise ConfigError(
            "a pipelined draft cannot be the target model itself",
            hint="load the draft separately, or run without the pipeline",
        )
    switch = session.record.pipeline = PipelineSwitch()
    # sequential rounds verify on every core, as the sequential engine does, and price by
    # what it learned; pipelined phases verify on fewer, and learn their own
    phases = {
        False: (learner.costs, learner.judge),
        True: (CostCurve(), split_judge(target, pipeline=True, learned=session.learned)),
    }
    with _cores(target, session.drafts, session.config.draft_threads) as cores:
        run = _Run(session, switch, cores, deque(enumerate(prompts)))
        try:
            switch.decide(_drafts_compute(learner.gate))
            while run.pending or run.active:
                cores.fit(switch.pipelined)
                learner.use_costs(*phases[switch.pipelined])
                yield from (_pipelined_phase if switch.pipelined else _sequential_phase)(run)
        finally:
            for r in run.active.values():
                target.release(r.seq)
            for key in list(run.active):
                learner.forget(key)
            learner.use_costs(*phases[False])


@dataclass
class _Run:
    """What the phases of one run share: the requests waiting and running, the switch
    that chooses each phase, and the split of the cores."""

    session: Session
    switch: PipelineSwitch
    cores: CoreSplit
    pending: deque[tuple[int, list[int]]]
    active: dict[int, Request] = field(default_factory=dict)


def _join(run: _Run) -> list[Request]:
    """Prefill pending requests while there is room (the time is not the window's); the
    requests prefilled, the running ones among them added to ``run.active``."""
    session = run.session
    t0 = time.perf_counter()
    joining = session.admit(run.pending, list(run.active.values()))
    run.switch.paused(time.perf_counter() - t0)
    for r in joining:
        if r.done:
            session.target.release(r.seq)
            session.learner.forget(r.key)
        else:
            run.active[r.key] = r
    return joining


def _sequential_phase(run: _Run) -> Iterator[list[Request]]:
    """Sequential rounds (no drafter thread) until the switch chooses the pipeline."""
    session, active = run.session, run.active
    while run.pending or active:
        joined = _join(run)
        if joined:
            yield joined
        live = list(active.values())
        if not live:
            continue
        before = sum(len(r.tokens) for r in live)
        session.round(live)
        produced = sum(len(r.tokens) for r in live) - before
        for r in [r for r in live if r.done]:
            del active[r.key]
            session.target.release(r.seq)
            session.learner.forget(r.key)
        yield live
        if run.switch.observe(produced) and run.switch.decide(_drafts_compute(session.learner.gate)):
            return


def _pipelined_phase(run: _Run) -> Iterator[list[Request]]:
    """Drafting on a drafter thread while the target verifies, until the switch chooses
    sequential rounds; then the thread is stopped and what it holds for the drafters is
    delivered (drafts it made ahead are dropped)."""
    session, switch = run.session, run.switch
    target, learner = session.target, session.learner
    pool = _Pool()
    pool.pin = run.cores.pin_drafter
    pool.todo.extend(run.active.values())
    pool.batch = _verify_batch(len(run.active), learner.gate)
    drafter = threading.Thread(target=_draft_loop, args=(pool, session), name="coinfer-drafter", daemon=True)
    drafter.start()
    try:
        while run.pending or run.active:
            joined = _admit(pool, run)
            if joined:
                yield joined
            batch = _take_batch(pool)
            if not batch:
                continue
            before = sum(len(r.tokens) for r, _ in batch)
            events = learner.verify(target, batch, session.record)
            produced = sum(len(r.tokens) for r, _ in batch) - before
            _settle(pool, session, batch, run.active, events)
            yield [r for r, _ in batch]
            can = _drafts_compute(learner.gate)
            if (switch.observe(produced) or not can) and not switch.decide(can):
                break
    finally:
        with pool.cv:
            pool.stop = True
            pool.cv.notify_all()
        drafter.join()
        learner.feed(pool.feedback)
        for key in pool.forget:
            learner.forget(key)
        session.record.predrafts_wasted += len(pool.predrafts)
    if pool.error is not None:
        raise pool.error


def _admit(pool: _Pool, run: _Run) -> list[Request]:
    """Prefill pending requests while there is room, and hand them to the drafter (one
    that ends at its first token is done at once); the requests prefilled."""
    joining = _join(run)
    if not joining:
        return joining
    with pool.cv:
        pool.todo.extend(r for r in joining if not r.done)
        pool.batch = _verify_batch(len(run.active), run.session.learner.gate)
        pool.cv.notify_all()
    return joining


def _drafts_compute(gate: SourceGate | None) -> bool:
    """Whether drafting takes time worth overlapping: without a gate every draft drafts;
    with one, only while it has a draft model on (n-gram lookup costs next to nothing)."""
    return gate is None or gate.a_model_is_on


def _verify_batch(active: int, gate: SourceGate | None) -> int:
    """Requests per verification: half the active ones, so that one half is drafted
    while the other is verified; all of them while drafting takes no time worth
    overlapping (a bigger batch verifies cheaper)."""
    return max(1, (active + 1) // 2) if _drafts_compute(gate) else max(1, active)


def _take_batch(pool: _Pool) -> list[tuple[Request, Voted]]:
    """Up to ``b`` drafted requests, waiting for the drafter when the pool is empty."""
    with pool.cv:
        while not pool.ready and pool.error is None and (pool.todo or pool.drafting):
            pool.cv.wait()
        if pool.error is not None:
            raise pool.error
        batch = [pool.ready.popleft() for _ in range(min(pool.batch, len(pool.ready)))]
        for r, v in batch:
            pool.in_flight[r.key] = (r, v)
        pool.cv.notify_all()
        return batch


def _settle(
    pool: _Pool,
    session: Session,
    batch: list[tuple[Request, Voted]],
    active: dict[int, Request],
    events: list[Feedback],
) -> None:
    """After a verification: finished requests leave; the others get their pre-draft if
    the target did what it assumed, or go back to be drafted; the drafters' feedback is
    handed to the drafter thread."""
    run = session.record
    with pool.cv:
        pool.feedback += events
        for r, _ in batch:
            pool.in_flight.pop(r.key, None)
            guess = pool.predrafts.pop(r.key, None)
            if r.done:
                del active[r.key]
                session.target.release(r.seq)
                pool.forget.append(r.key)
                run.predrafts_wasted += guess is not None
            elif guess is not None and guess[0] == r.context:
                pool.ready.append((r, guess[1]))
                run.predrafts_used += 1
            else:
                run.predrafts_wasted += guess is not None
                pool.todo.append(r)
        pool.batch = _verify_batch(len(active), session.learner.gate)
        pool.cv.notify_all()


def _draft_loop(pool: _Pool, session: Session) -> None:
    """The drafter thread: deliver feedback, then draft what waits, else pre-draft what is
    being verified."""
    learner = session.learner
    try:
        pool.pin()
        while True:
            with pool.cv:
                job = None
                while not (pool.stop or pool.forget or pool.feedback):
                    job = _next_job(pool)
                    if job is not None:
                        break
                    pool.cv.wait()
                forget, pool.forget = pool.forget, []
                feedback, pool.feedback = pool.feedback, []
                stop = pool.stop
                weights, s = list(learner.weights.weights), learner.s
            learner.feed(feedback)
            for key in forget:
                learner.forget(key)
            if stop:
                return
            if job is not None:
                _do_job(pool, session, weights, s, job)
    except BaseException as exc:  # noqa: BLE001 - handed to the verifying thread
        with pool.cv:
            pool.error = exc
            pool.cv.notify_all()


def _next_job(pool: _Pool) -> tuple[str, list[tuple[Request, list[int]]]] | None:
    """What to draft next (called holding the lock): requests waiting for a draft while
    the pool has room; else pre-drafts for requests under verification."""
    if pool.todo and len(pool.ready) < pool.batch:
        take = [pool.todo.popleft() for _ in range(min(len(pool.todo), pool.batch))]
        pool.drafting.update(r.key for r in take)
        return "draft", [(r, list(r.context)) for r in take]
    if pool.todo:
        return None
    ahead = [
        (r, [*r.context, *v.draft, v.guess])
        for key, (r, v) in pool.in_flight.items()
        if v.guess is not None and key not in pool.predrafts and key not in pool.drafting
    ]
    if not ahead:
        return None
    pool.drafting.update(r.key for r, _ in ahead)
    return "predraft", ahead


def _do_job(
    pool: _Pool,
    session: Session,
    weights: list[float],
    s: int,
    job: tuple[str, list[tuple[Request, list[int]]]],
) -> None:
    kind, items = job
    run = session.record
    t0 = time.perf_counter()
    votes = session.draft([(r.key, c) for r, c in items], guess=True, s=s, weights=weights)
    run.draft_s += time.perf_counter() - t0
    with pool.cv:
        for (r, context), v in zip(items, votes, strict=True):
            pool.drafting.discard(r.key)
            if kind == "draft":
                pool.ready.append((r, v))
            elif r.key in pool.in_flight:
                pool.predrafts[r.key] = (context, v)
            elif r.context == context and _remove(pool.todo, r.key):  # verified meanwhile, as assumed
                pool.ready.append((r, v))
                run.predrafts_used += 1
            else:
                run.predrafts_wasted += 1
        pool.cv.notify_all()


def _remove(todo: deque[Request], key: int) -> bool:
    """Take the request ``key`` out of ``todo``; whether it was there."""
    for r in todo:
        if r.key == key:
            todo.remove(r)
            return True
    return False


class CoreSplit:
    """The split of the machine's cores between the target and the draft models: while
    pipelined, the drafts' ``draft_threads`` cores and the rest; otherwise every core to
    whichever model computes."""

    def __init__(
        self, target: SteerableModel, draft_models: list[SteerableModel], cpus: list[int], draft_threads: int
    ) -> None:
        self.target = target
        self.draft_models = draft_models
        self.cpus = cpus
        self.draft_cpus = cpus[len(cpus) - draft_threads :] if len(cpus) > draft_threads else []
        self.split: bool | None = None  # unknown until the first fit

    def pin_drafter(self) -> None:
        """Pin the calling (drafter) thread to the drafts' cores."""
        if self.draft_cpus:
            os.sched_setaffinity(0, self.draft_cpus)

    def fit(self, pipelined: bool) -> None:
        """Split the cores while pipelined; give each model every core otherwise."""
        split = pipelined and bool(self.draft_cpus)
        if split == self.split or not self.draft_cpus:
            return
        self.split = split
        every = len(self.cpus)
        self.target.set_threads(every - len(self.draft_cpus) if split else every)
        for model in self.draft_models:
            model.set_threads(len(self.draft_cpus) if split else every)


@contextmanager
def _cores(target: SteerableModel, drafts: Sequence[Drafter], draft_threads: int) -> Iterator[CoreSplit]:
    """The run's ``CoreSplit``; every model's thread count is restored after."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    draft_models = [d.model for d in drafts if d.model is not None]
    cores = CoreSplit(target, draft_models, cpus, draft_threads)
    if not cores.draft_cpus:
        yield cores
        return
    before = [(m, m.set_threads(len(cpus))) for m in [target, *draft_models]]
    cores.split = False
    try:
        yield cores
    finally:
        for model, threads in before:
            if threads is not None:
                model.set_threads(threads)
