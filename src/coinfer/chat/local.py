"""A steerable model as a chat model that answers a batch of conversations concurrently.

``LocalChat.chat_batch`` runs up to ``max_concurrent`` conversations at once as separate
sequences of one model, decoded together: every step is one ``extend_many`` call that
prefills the prompts of newly admitted conversations and advances every running one by a
token (continuous batching: a finished conversation's slot goes to a waiting one at once,
the one with the fewest prompt tokens to read, ``chat.admission``, in the step whose
prompt budget reaches it). On llama.cpp, whose sequences share one context of ``n_ctx``
cells, a conversation is admitted only when its prompt and its whole token budget fit
beside the running ones, so a batch never overflows the cache halfway. Each of a
request's ``n`` samples is its own sequence; usage counts every prompt token, as APIs do.

A prompt is read in chunks between decoding steps (``prefill_chunk`` prompt tokens a step,
shared by the prompts being read, as vLLM's chunked prefill and llama-server's
``n_batch`` do): a long prompt never stalls the running conversations for its whole
length, and a short one that arrives behind it is read first, within the step it joins
(the oldest prompt keeps half of each step's budget, so it always advances).

The caches of the last ``keep`` finished conversations are kept: a new conversation that
shares at least ``min_reuse`` leading tokens with one of them continues from a copy of
it (``fork``; the kept cache stays for the next one sharing it, where a sequence slot is
free), so a chat that grows turn by turn over a long document (Minion's local side), or
requests that share a system prompt or a document, read it once. Kept caches give way,
oldest first, whenever slots or cells are needed. Requests in flight share too: a new
request copies the prefix a running one has read, and one that arrives while a running
request is still reading a prefix they share (of ``min_wait`` tokens or more) waits for
that read (a few chunks) and copies it, so a crowd that opens with one system prompt
reads it once, not once each.

A kept cache that gives way is not lost where ``store_bytes`` allows: it is copied out to
host memory (``chat.cache_store``; on llama.cpp 28 KB a token of Qwen2.5-1.5B). A new
conversation that shares a longer prefix with a stored copy than with any cache in a slot
gets a sequence restored from it (1-1.5 ms for 350 tokens, where reading them again takes
about 2 s on a 2-core CPU), so a chat whose user thinks between turns, while other
conversations take the slots, is not read again from its start.

Given a ``speculator`` (``decoding.batch_speculation``), the jobs draft, greedy or
sampling: in a step that reads no prompt, every drafting job's proposal rides in the one
forward, cut together so the forward pays for itself, and each keeps the prefix of its
draft that the target agrees with (``chat.drafting``; lossless: a greedy job's text is the
target's greedy text, a sampling one's what plain sampling draws from the same seed). Jobs
that follow a grammar or did not ask to speculate share the forward with one token each.

A request's ``json_schema`` is enforced where the model can constrain its tokens (on
llama.cpp, its grammar sampler over the schema's GBNF): the sampled token is checked
against the grammar, and only a refused one makes the whole vocabulary masked and the
token drawn again. Elsewhere the schema is a hint: callers that need JSON validate the
reply and retry, as the MinionS protocol does.

A request's ``tools`` go into the prompt through the model's template (``ChatRequest.prompt``);
replies that are calls come back as ``ChatResult.tool_calls``; a forced call is a schema.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from coinfer.chat.admission import next_admitted, passed_over, passes_before_due, reads_this_step
from coinfer.chat.base import ChatModel, ChatRequest, ChatResult, Usage
from coinfer.chat.cache_store import CacheStore
from coinfer.chat.drafting import DraftingSteps
from coinfer.chat.job import Job, seq_of
from coinfer.chat.prefill import share_step
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.cost_curve import CostCurve
from coinfer.decoding.drafters import common_prefix
from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.decoding.split import SplitJudge, planned_cut
from coinfer.errors import ConfigError, ContextOverflowError, ModelError
from coinfer.models.base import Seq, SeqState, SteerableModel

__all__ = ["PREFILL_CHUNK", "LocalChat", "open_local_chat"]

PREFILL_CHUNK = 512  # prompt tokens read per step, shared by the prompts being read
# A kept or running cache is continued from when it shares this many leading tokens with a
# new prompt (after the model's cut, ``_cut``). Qwen2.5-Coder-1.5B on a 2-core CPU,
# 8192-cell streams: a copy (then a whole llama.cpp stream, whatever the share) and one
# token read cost 56-91 ms, reading 8 tokens 190 ms and 16 tokens 225-239 ms. So a chat
# template's opening (24-33 tokens, every request's) is worth it, as llama-server's slots
# reuse it (cache_prompt). A copy is now of the source's cells: 3-23 ms for 300, 40-50 ms for
# 2,000 (``docs/bench/serve/one-off/fork_copy.txt``).
MIN_REUSE = 16
MIN_WAIT = 64  # a new request waits for a running one's read of a prefix they share this long
SMOOTHING, REFRESH = 0.3, 64  # the decoding steps' cost curve: a new measurement's weight, a point's age


class LocalChat(DraftingSteps, ChatModel):
    """Chat with a local steerable model, many conversations at once."""

    def __init__(
        self,
        model: SteerableModel,
        *,
        max_concurrent: int = 8,
        seed: int = 0,
        keep: int = 2,
        min_reuse: int = MIN_REUSE,
        min_wait: int = MIN_WAIT,
        prefill_chunk: int = PREFILL_CHUNK,
        store_bytes: int = 0,
        admission: str = "shortest",
    ) -> None:
        if max_concurrent < 1 or min(keep, store_bytes) < 0 or min(min_reuse, min_wait, prefill_chunk) < 1:
            raise ConfigError(
                "need max_concurrent >= 1, keep >= 0, store_bytes >= 0, and min_reuse, min_wait and "
                "prefill_chunk >= 1"
            )
        self.model, self.prefill_chunk = model, prefill_chunk
        self.name = model.name
        self.max_concurrent = max_concurrent
        self.due_after = passes_before_due(admission, max_concurrent)  # passes before a waiting job goes next
        self.keep, self.min_reuse, self.min_wait = keep, min_reuse, max(min_reuse, min_wait)
        self._kept: list[Seq] = []  # finished conversations' caches, oldest first
        self.store = CacheStore(store_bytes)  # caches that gave way, copied out to host memory
        self._seed, self._calls = seed, 0
        self._keys = itertools.count()
        self.speculator: BatchSpeculator | None = None  # drafts for the jobs that speculate
        # what a step that reads no prompt cost, by its rows (as run: whole or split), and
        # whether its forward pays as two (``_forwards``): learned on this chat's model
        self.step_costs, self.split_judge = CostCurve(), SplitJudge()

    def close(self) -> None:
        """Free the kept and stored caches (the model itself belongs to the caller)."""
        while self._kept:
            self.model.release(self._kept.pop())
        self.store.clear()

    @property
    def stored_bytes(self) -> int:
        """Host memory the stored copies of caches take."""
        return self.store.nbytes

    def chat(self, request: ChatRequest) -> ChatResult:
        return self.chat_batch([request])[0]

    def chat_batch(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        jobs = self.jobs_for(requests)
        self._run(jobs)
        return self.results(requests, jobs)

    def jobs_for(self, requests: Sequence[ChatRequest]) -> list[Job]:
        """One call's requests as jobs for ``step`` (request i's samples have ``request == i``)."""
        self._calls += 1
        return [job for i, r in enumerate(requests) for job in self._jobs(i, r)]

    def results(self, requests: Sequence[ChatRequest], jobs: list[Job]) -> list[ChatResult]:
        """The answers of one call's ``requests``, from its finished jobs."""
        return [self._result(r, [j for j in jobs if j.request == i]) for i, r in enumerate(requests)]

    def _jobs(self, index: int, request: ChatRequest) -> list[Job]:
        return self.new_jobs(
            index, request.prompt(self.model), n=request.n, max_tokens=request.max_tokens,
            params=SamplingParams(temperature=request.temperature, seed=request.seed),
            json_schema=request.reply_schema,
        )  # fmt: skip

    def new_jobs(
        self, index: int, prompt: list[int], *, n: int, max_tokens: int, params: SamplingParams,
        json_schema: Mapping[str, Any] | None = None, speculate: bool = True,
    ) -> list[Job]:  # fmt: skip
        """The ``n`` samples of one request as jobs for ``step`` (sample s seeded with
        ``params.seed + s`` when a seed is given); ``speculate``: whether they draft where
        the chat has a speculator and they decode greedily."""
        budget = min(max_tokens, self.model.n_ctx - len(prompt))
        if budget < 1:
            raise ContextOverflowError(
                f"the conversation has {len(prompt)} tokens and {self.name}'s context window holds "
                f"{self.model.n_ctx}",
                hint="send a shorter document or question, or load the local model with a larger --ctx",
            )
        jobs = []
        for s in range(n):
            seed = params.seed + s if params.seed is not None else None
            draws = PositionDraws(seed if seed is not None else _unseeded(self._seed, self._calls, index, s))
            constraint = self.model.json_constraint(json_schema) if json_schema else None
            job = Job(index, prompt, budget, replace(params, seed=seed), draws, constraint=constraint)
            job.key = next(self._keys)
            job.speculate = speculate and self.speculator is not None and job.constraint is None
            jobs.append(job)
        return jobs

    def _run(self, jobs: list[Job]) -> None:
        """Decode every job to its finish, up to ``max_concurrent`` at a time."""
        waiting, running = deque(jobs), list[Job]()
        try:
            while waiting or running:
                running = self.step(waiting, running)
        finally:
            self.abandon(jobs)

    def abandon(self, jobs: Sequence[Job]) -> None:
        """Release the caches ``jobs`` still hold (after a failure, or for good measure at
        the end: a finished job has already given its cache up)."""
        for job in jobs:
            self._retire(job, force=True)

    def step(self, waiting: deque[Job], running: list[Job]) -> list[Job]:
        """One step of continuous batching: admit what fits from ``waiting``, retire the
        cancelled jobs, feed the model once (the prompts' next chunks and each running
        job's latest token), then output each job's next token and retire the finished
        ones. Returns the jobs still running."""
        self._admit(waiting, running)
        feed = self._prompt_chunks(running)
        decoding_only = not feed  # a step that reads no prompt: its forward's cost is a curve point
        for job in running:
            if job.unread is not None and job.finish is None:
                feed.append((job, [job.unread]))
            job.unread = None
        running = [j for j in running if not self._retire(j)]
        for job, seq in zip(running, self.model.packed([seq_of(j) for j in running]), strict=True):
            job.seq = seq  # into a gap a finished job left (llama.cpp: one pass runs consecutive streams)
        # in the model's batch order: llama.cpp with a cache per sequence runs a batch's
        # sequences in one pass only where their streams come in increasing, consecutive order
        feed = sorted(((j, ids) for j, ids in feed if j.finish is None), key=self._batch_order)
        if not feed:
            return running
        # the speculator of a step that may draft: it reads no prompt and a job speculates
        drafter = self.speculator if decoding_only and any(j.speculate for j, _ in feed) else None
        gate = None if drafter is None else drafter.gate
        t0 = time.perf_counter()
        if drafter is not None and (gate is None or gate.drafting(len(feed))):
            produced, verified = self._speculate(feed, drafter)
            if gate is not None:  # a step whose drafts were all cut away is a plain step
                gate.observe(len(feed), verified > 0, produced, time.perf_counter() - t0)
            return self._take_next(running)
        parts = self._forwards(feed) if decoding_only else [feed]
        for part in parts:
            self._feed(part)
        elapsed = time.perf_counter() - t0
        if decoding_only:
            self._measured(len(feed), len(parts) > 1, elapsed)
            if self.speculator is not None:
                passes = [
                    p for part in parts for p in self.model.pass_rows([(seq_of(j), 1) for j, _ in part])
                ]
                self.speculator.measured(len(feed), elapsed, passes=passes)
        if gate is not None:
            gate.observe(len(feed), False, len(feed), elapsed)
        for job, _ in feed:
            if job.reading:  # a chunk's last row is not the prompt's: its next token is not known yet
                job.choice = job.logits = None
        return self._take_next(running)

    def _take_next(self, running: list[Job]) -> list[Job]:
        """Each job's next token, output as soon as the forward gives it (the next step
        reads it), and the jobs that it ended retired: a stream's first token and its end
        reach its client with the forward that made them, not a forward later (another
        prompt's read, several seconds on a CPU; a client that waits for its answer before
        it asks again lost that step per request). Returns the jobs still running."""
        for job in running:
            if job.fed and job.finish is None:
                job.unread = self._next_token(job)
        return [j for j in running if not self._retire(j)]

    def _forwards(self, feed: list[tuple[Job, list[int]]]) -> list[list[tuple[Job, list[int]]]]:
        """A decoding step's rows in one forward, or in two where paired measurements say
        two cost less (``split.planned_cut``): on a CPU a forward's cost is not monotonic
        in its rows, as llama.cpp changes kernels with a batch's size (on this project's
        2-core machines 8 rows cost 1.3-1.4 times 7; ``docs/bench/serve``). The rows go in the
        model's ``batch_order``: with a llama.cpp cache per sequence a forward attends over
        every stream between its rows' lowest and highest, so two halves of scattered
        streams cost each nearly the whole (4 + 4 rows measured 1.16x one forward of 8)
        before the rows were sorted (``step``)."""
        at = planned_cut([len(ids) for _, ids in feed], self.step_costs, self.split_judge)
        return [feed[:at], feed[at:]] if at else [feed]

    def _batch_order(self, item: tuple[Job, list[int]]) -> int:
        return self.model.batch_order(seq_of(item[0]))

    def _measured(self, rows: int, split: bool, seconds: float) -> None:
        """A decoding step over ``rows`` tokens took ``seconds``, in one forward or two."""
        self.step_costs.record(rows, seconds, SMOOTHING, REFRESH)
        self.split_judge.measured(rows, split=split, seconds=seconds)

    def _prompt_chunks(self, running: list[Job]) -> list[tuple[Job, list[int]]]:
        """The next chunk of each prompt being read, ``prefill_chunk`` tokens in all this
        step, shared as ``prefill.share_step`` plans: the shortest rests first, the oldest
        keeping half until its turn. A chunk is cut where its rows and the rest's take the
        kernels of a whole read (``_chunk_size``), so an answer does not move with what
        else was read beside it; a prompt whose share makes no such chunk reads next step."""
        readers = _readers(running)
        feed: list[tuple[Job, list[int]]] = []
        for i, take in share_step(
            [j.prompt_left for j in readers],
            self.prefill_chunk,
            lambda k, budget: _chunk_size(readers[k], budget, self.model),
        ):
            job = readers[i]
            feed.append((job, job.prompt[job.read : job.read + take]))
            job.read += take
        return feed

    def _feed(self, feed: list[tuple[Job, list[int]]]) -> None:
        """One forward over every job's new tokens. A greedy job gets only its choice back
        (one id, not a vocabulary of logits); one that samples or follows a grammar, its logits."""
        items = [(seq_of(j), ids) for j, ids in feed]
        if all(job.greedy for job, _ in feed):
            for (job, _), choice in zip(feed, self.model.extend_many_greedy(items), strict=True):
                job.choice = int(choice)
            return
        choices, rows = self.model.extend_many_next(items, [not job.greedy for job, _ in feed])
        for (job, _), choice, logits in zip(feed, choices, rows, strict=True):
            if logits is None:
                job.choice = int(choice)
            else:
                job.logits = logits

    def cancel(self, job: Job, waiting: deque[Job]) -> None:
        """Stop ``job`` (its client went away): out of ``waiting``, or retired, its cache
        released, at the next ``step``."""
        job.finish = job.finish or "cancelled"
        if job in waiting:
            waiting.remove(job)
            self._retire(job, force=True)

    def _admit(self, waiting: deque[Job], running: list[Job]) -> None:
        """Start waiting jobs while slots and (on a shared cache) cells allow and this step's
        prompt budget reaches them (``admission.reads_this_step``), the fewest prompt
        tokens left to read first (``admission``: a job passed over by a batch's worth of
        later ones goes first): each gets a sequence (a copy of a kept or running one
        holding part of its prompt, if any), its prompt read from there."""
        shared = self.model.kv_cells_shared
        used = sum(j.reserve for j in running)
        held: dict[int, int] = {}  # id(job): its prompt tokens a cache holds, looked up once per call
        chunk = self.prefill_chunk
        readers = [j.prompt_left for j in _readers(running)]  # their rests
        while waiting and len(running) < self.max_concurrent:
            job = next_admitted(waiting, lambda j: self._to_read(j, running, held), self.due_after)
            if job is None or not reads_this_step(len(job.prompt) - held[id(job)], readers, chunk):
                break  # running jobs are reading its prefix, or this step's reading is full
            source, common = self._reusable(job.prompt, running)
            self._make_room(len(running), used + job.reserve, source)
            if shared and running and used + job.reserve > self.model.n_ctx:
                break
            passed_over(waiting, job)
            waiting.remove(job)
            job.seq, common = self._cache_for(source, common, len(running))
            job.read = job.cached = common
            running.append(job)
            readers.append(job.prompt_left)
            used += job.reserve

    def _to_read(self, job: Job, running: list[Job], held: dict[int, int]) -> int | None:
        """The prompt tokens ``job`` would read if admitted now (its prompt less what a
        cache holds of it, remembered in ``held``: an admission in the same call changes
        that only where a kept cache gives way, and then only the order); None while a
        running job reads a prefix it shares."""
        if self._reading_shared(job.prompt, running):
            return None
        if id(job) not in held:
            held[id(job)] = self._reusable(job.prompt, running)[1]
        return len(job.prompt) - held[id(job)]

    def _make_room(self, running: int, reserved: int, source: Seq | SeqState | None) -> None:
        """Kept caches give way, oldest first (but ``source``, which the next job reads
        from): for a sequence slot, and on a shared cache for the cells ``reserved``."""
        slots, shared, n_ctx = self.model.max_sequences, self.model.kv_cells_shared, self.model.n_ctx
        while slots is not None and running + len(self._kept) + 1 > slots and self._drop_oldest(but=source):
            pass
        while shared and reserved + sum(map(len, self._kept)) > n_ctx and self._drop_oldest(but=source):
            pass

    def _drop_oldest(self, *, but: Seq | SeqState | None) -> bool:
        victim = next((k for k in self._kept if k is not but), None)
        if victim is None:
            return False
        self._kept.remove(victim)
        self._give_way(victim)
        return True

    def _give_way(self, seq: Seq) -> None:
        """Release a finished conversation's cache, a copy of it stored first where the
        budget allows."""
        if self.store.budget and len(seq.tokens) >= self.min_reuse:
            state = self.model.save_state(seq)
            if state is not None:
                self.store.add(state)
        self.model.release(seq)

    def _cache_for(self, source: Seq | SeqState | None, common: int, running: int) -> tuple[Seq, int]:
        """A job's sequence and the prompt tokens it holds: a new one; or a copy of
        ``source`` cut to the ``common`` prefix: a running job's, or a kept one's where a
        slot is free for it, ``source`` staying kept for the next request that shares it (a
        system prompt, a document); else the kept ``source`` itself; or one restored from a
        stored copy (``_restored``)."""
        if source is None:
            return self.model.new_sequence(), 0
        if isinstance(source, SeqState):
            return self._restored(source, common)
        if source in self._kept:
            self._kept.remove(source)
            slots = self.model.max_sequences
            if slots is not None and running + len(self._kept) + 2 > slots:
                self.model.truncate(source, common)  # no slot for a copy: the job takes it
                return source, common
            self._kept.append(source)  # it stays kept, now the most recently used
        seq = self.model.fork(source)  # a running job's goes on beside its copy
        self.model.truncate(seq, common)
        return seq, common

    def _restored(self, state: SeqState, common: int) -> tuple[Seq, int]:
        """A sequence restored from a stored copy, cut to the ``common`` prefix; the copy
        stays stored, now the most recently used. Where the model cannot take it back (a
        shared cache without the cells for the whole copy), the copy goes and the job reads
        its prompt from the start."""
        try:
            seq = self.model.restore(state)
        except ModelError:
            self.store.drop(state)
            return self.model.new_sequence(), 0
        self.model.truncate(seq, common)
        self.store.used(state)
        return seq, common

    def _reading_shared(self, prompt: list[int], running: list[Job]) -> bool:
        """Whether a running job is still reading a prefix (``min_wait`` tokens or more)
        that ``prompt`` shares: requests that arrive together with one system prompt or
        document read it once, the first for all. A shorter share (a chat template's
        opening) is not worth holding the queue for: the new job reads it itself."""
        for job in running:
            if job.reading and job.seq is not None:
                shared = min(common_prefix(job.prompt, prompt), len(prompt) - 1)
                if shared >= self.min_wait and job.read < shared:
                    return True
        return False

    def _reusable(self, prompt: list[int], running: Sequence[Job] = ()) -> tuple[Seq | SeqState | None, int]:
        """The cache sharing the longest prefix with ``prompt`` (a kept one, a running
        job's, or a stored copy, where it shares more than those in slots) and how many
        tokens of it to keep, when that is at least ``min_reuse``."""
        best: Seq | SeqState | None = None
        common = 0
        live = [j.seq for j in running if j.seq is not None and j.seq.pending is None]
        for seq in [*self._kept, *live]:
            n = common_prefix(seq.tokens, prompt)
            if n > common:
                best, common = seq, n
        state, n = self.store.longest(prompt)
        if n > common:
            best, common = state, n
        common = _cut(common, len(prompt), self.model)
        if best is None or common < self.min_reuse:
            return None, 0
        return best, common

    def _next_token(self, job: Job) -> int | None:
        """The job's next token (its greedy choice, or sampled); None (and ``finish`` set)
        when it is done."""
        if job.choice is not None:
            token, job.choice = job.choice, None
        else:
            token = self._sampled(job)
        return token if self._took(job, token) else None

    def _took(self, job: Job, token: int) -> bool:
        """Output ``token`` for ``job``; False (and ``finish`` set) when that ends it: an
        end token (not output) or the budget."""
        if token in self.model.eos_ids:
            job.finish = "stop"
            return False
        if job.constraint is not None:
            job.constraint.accept(token)
        job.tokens.append(token)
        if len(job.tokens) >= job.max_tokens:
            job.finish = "length"
            return False
        return True

    def _sampled(self, job: Job) -> int:
        """A token sampled from the job's logits, within its grammar where it has one."""
        assert job.logits is not None
        logits, job.logits = job.logits, None
        u = job.draws.uniform(job.position)
        token = sample_at(probs_from_logits(logits, job.params), u)
        if job.constraint is not None and not job.constraint.allows(token):
            allowed = job.constraint.restrict(logits)
            if not np.isfinite(allowed).any():  # the grammar is complete or stuck: nothing may follow
                return next(iter(self.model.eos_ids))
            token = sample_at(probs_from_logits(allowed, job.params), u)
        return token

    def _retire(self, job: Job, *, force: bool = False) -> bool:
        """Keep a finished job's cache for reuse (the oldest kept one goes), or release it
        (any job's, when ``force``: after a failure the cache may not match); whether it was done."""
        if job.constraint is not None and (job.finish is not None or force):
            job.constraint.close()
        if job.speculate and self.speculator is not None and (job.finish is not None or force):
            self.speculator.forget(job.key)
        if job.seq is None or (job.finish is None and not force):
            return job.finish is not None
        if force:  # after a failure the cache may not match its tokens: nothing of it is kept
            self.model.release(job.seq)
        elif not self.keep:
            self._give_way(job.seq)
        else:  # the oldest kept one gives way first, so that the new one can move out of the way
            while len(self._kept) >= self.keep:
                self._give_way(self._kept.pop(0))
            self._kept.append(self.model.park(job.seq))
        job.seq = None
        return job.finish is not None

    def _result(self, request: ChatRequest, jobs: list[Job]) -> ChatResult:
        texts = [self.model.detokenize(j.tokens) for j in jobs]
        usage = Usage(
            prompt_tokens=sum(len(j.prompt) for j in jobs),
            completion_tokens=sum(len(j.tokens) for j in jobs),
            calls=1,
        )
        return ChatResult.read(texts, [j.finish or "length" for j in jobs], usage, request.tools)


def _cut(common: int, length: int, model: SteerableModel) -> int:
    """Where a prompt of ``length`` tokens sharing ``common`` with a cache continues it: it
    reads the model's ``min_tail`` (at least one token, for fresh logits), from a multiple
    of its ``prefix_block`` (its rows then run as in a read of the whole prompt)."""
    common = min(common, length - model.min_tail)
    return max(0, common - common % model.prefix_block)


def _readers(running: Sequence[Job]) -> list[Job]:
    """The running jobs whose prompts are still being read, oldest first."""
    return [j for j in running if j.reading and j.finish is None]


def _chunk_size(job: Job, budget: int, model: SteerableModel) -> int:
    """How many of ``job``'s next prompt tokens to read within ``budget``: the rest of the
    prompt where it fits; else a chunk that ends where a prompt continued from a cached
    prefix would (``_cut``), with at least ``min_tail`` rows in it; else none (0)."""
    if job.prompt_left <= budget:
        return job.prompt_left
    end = _cut(job.read + budget, len(job.prompt), model)
    return end - job.read if end - job.read >= model.min_tail else 0


def open_local_chat(
    spec: str,
    *,
    n_ctx: int = 16384,
    parallel: int = 8,
    keep: int = 2,
    prefill_chunk: int = PREFILL_CHUNK,
    store_bytes: int = 0,
    admission: str = "shortest",
    backend: str = "llama.cpp",
    n_threads: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
) -> LocalChat:
    """A model loaded for chat: on llama.cpp, ``parallel + keep`` sequences, each with its own
    ``n_ctx`` cells (a unified cache would make every token attend over every
    conversation's cells: measured 0.74x the jobs/s of one at a time for 8 MinionS jobs,
    against 1.21x with separate caches)."""
    from coinfer.models import load_model

    model = load_model(
        spec,
        backend=backend,
        n_ctx=n_ctx,
        n_threads=n_threads,
        device=device,
        dtype=dtype,
        n_seq_max=parallel + keep,
        kv_unified=False,
    )
    return LocalChat(
        model,
        max_concurrent=parallel,
        keep=keep,
        prefill_chunk=prefill_chunk,
        store_bytes=store_bytes,
        admission=admission,
    )


def _unseeded(chat_seed: int, calls: int, index: int, sample: int) -> int:
    """A request's seed where it gave none: the chat's, its call, the request and the
    sample, mixed (so unseeded samples differ, and a chat opened with one seed repeats)."""
    return int(np.random.default_rng([chat_seed, calls, index, sample]).integers(2**62))
