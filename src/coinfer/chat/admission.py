"""Which waiting job a continuous batch admits next, when more wait than slots are free.

Shortest job first: the job with the fewest prompt tokens left to read (its prompt less
the prefix a kept, running or stored cache holds), ties oldest first. A crowd that arrives
together then starts with the prompts that are read soonest: the batch's first wave of
answers begins after the least reading, and a slot that frees goes to the request whose
first token it gives soonest (the order SGLang's and vLLM's schedulers offer beside
first-come-first-served, for the same reason: the median wait is shortest). Answers do
not change with the order.

A long prompt is never starved: a job is *passed over* each time a job that arrived after
it is admitted first, and a job passed over ``due_after`` times (the batch's width: one
batch's worth of later, shorter requests) goes next, oldest first, before any shorter one.

Only the oldest ``WINDOW`` batches' worth of waiting jobs are candidates: what a job has
to read is a prefix lookup over every kept, running and stored cache, and a queue of
hundreds (a crowd at the server's queue limit) would price them all at each admission.
A job further back joins the candidates as older ones go.

A job is admitted only where it starts reading in the step being planned
(``reads_this_step``, by the plan the step itself reads with: ``prefill.share_step``): the
prompts being read share a step's budget shortest first, and one admitted beyond what the
step reads would hold a slot without reading. A crowd's first step then takes only what it
reads, and those that arrive while that step runs (a burst reaches the server over some
milliseconds, in any order) still go shortest first at the next one, not in the order they
arrived, as vLLM's scheduler starts a waiting request only within a step's token budget.

``--admission arrival`` admits in order of arrival instead (``due_after`` 0: the oldest
is always due), for an operator who would rather a long prompt (a document) not wait
behind a crowd of short ones than have the crowd's median answer start sooner.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

from coinfer.chat.job import Job
from coinfer.chat.prefill import share_step
from coinfer.errors import ConfigError

__all__ = ["POLICIES", "WINDOW", "next_admitted", "passed_over", "passes_before_due", "reads_this_step"]

WINDOW = 4  # batches' worth of the oldest waiting jobs that are candidates
POLICIES = ("shortest", "arrival")


def passes_before_due(policy: str, width: int) -> int:
    """How often a job may be passed over before it goes next: a batch's ``width``
    shortest first, never in order of arrival."""
    if policy not in POLICIES:
        raise ConfigError(f"no admission policy {policy!r}", hint=f"use one of {', '.join(POLICIES)}")
    return width if policy == "shortest" else 0


def next_admitted(waiting: Sequence[Job], to_read: Callable[[Job], int | None], due_after: int) -> Job | None:
    """The job to admit next from ``waiting`` (in arrival order): the oldest one passed
    over ``due_after`` times or more, else the one among the oldest ``WINDOW *
    due_after`` with the fewest prompt tokens ``to_read``, ties oldest first. ``to_read``
    gives None for a job that must wait (a running job is still reading a prefix it
    shares); None when nothing may go now (the due job must wait, or every job must)."""
    if not waiting:
        return None
    oldest = waiting[0]
    if oldest.passed >= due_after:
        return oldest if to_read(oldest) is not None else None
    best: Job | None = None
    fewest = 0
    for job in itertools.islice(waiting, WINDOW * max(due_after, 1)):
        n = to_read(job)
        if n is not None and (best is None or n < fewest):
            best, fewest = job, n
    return best


def passed_over(waiting: Sequence[Job], admitted: Job) -> None:
    """``admitted`` goes ahead of every job that arrived before it: each is passed over once."""
    for job in waiting:
        if job is admitted:
            return
        job.passed += 1


def reads_this_step(rest: int, readers: Sequence[int], chunk: int) -> bool:
    """Whether a job with ``rest`` prompt tokens to read, admitted now, reads in this step:
    the prompts being read (``readers``: each one's rest, the oldest first, the jobs just
    admitted last) share the step's ``chunk`` shortest rest first, ties oldest first, and
    until its turn the oldest keeps half of it: the plan ``prefill.share_step`` makes for
    ``LocalChat._prompt_chunks``, each prompt's chunk uncut."""
    rests = [*readers, rest]
    plan = share_step(rests, chunk, lambda k, budget: min(budget, rests[k]))
    return any(i == len(readers) for i, _ in plan)
