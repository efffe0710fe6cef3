"""The steps of a collective round, shared by the sequential and the pipelined engine.

A request's ``context`` is its prompt and the tokens decided so far; the last of them is
*pending*: chosen, but not yet in the target's cache. A round drafts after the context,
votes, sends ``[pending, *voted draft]`` to the target, keeps the accepted prefix and the
target's own next token, and rolls the rest back.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coinfer.decoding.draft_length import AdaptiveDraftLength, CostCurve, DraftSizer
from coinfer.decoding.drafters import Drafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import DecodeStats
from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.decoding.speculative import take_round, window_room
from coinfer.decoding.split import SplitJudge, planned_cut
from coinfer.decoding.verify import accept_choices, accept_deterministic
from coinfer.engines.collective.config import CollectiveConfig
from coinfer.engines.collective.gate import SourceGate
from coinfer.engines.collective.selector import SpeculationLengthSelector
from coinfer.engines.collective.switch import PipelineSwitch
from coinfer.engines.collective.voting import VoteWeights, held_prefix, majority_vote
from coinfer.models.base import Seq, SteerableModel

__all__ = [
    "Feedback",
    "Learner",
    "Request",
    "RunRecord",
    "Session",
    "Voted",
    "draft_and_vote",
    "new_request",
    "prefill",
]

SMOOTHING = 0.3  # weight of a new measurement in the cost curve (``AdaptiveDraftLength``'s)
REFRESH = 64  # forwards after which a point of the cost curve is stale (``CostCurve``)


@dataclass
class RunRecord:
    """The engine's own record of a run, every request together (``extras`` of responses)."""

    drafts: list[str]
    draft_s: float = 0.0  # drafting and voting (overlapped with verifying when pipelined)
    verify_s: float = 0.0
    verifications: int = 0  # batched target forwards after the prefills
    forward_shapes: dict[tuple[int, int], int] = field(default_factory=dict)  # (rows, tokens) -> forwards
    forward_ms: dict[tuple[int, int], float] = field(default_factory=dict)  # (rows, tokens) -> summed ms
    prefill_s: float = 0.0  # the target reading prompts (batched, as requests join)
    longest_draft: list[int] = field(default_factory=list)  # per verification: its longest voted draft
    source_rates: list[list[float]] = field(default_factory=list)  # per draft, per draft it made
    voted_rates: list[float] = field(default_factory=list)  # per verified non-empty voted draft
    voted_from: list[int] = field(default_factory=list)  # per verified voted draft: its drafter
    predrafts_used: int = 0  # pipelined: drafts made during the verification they assumed
    predrafts_wasted: int = 0
    pipeline: PipelineSwitch | None = None  # with the pipeline allowed: the switch, its counts

    def __post_init__(self) -> None:
        self.source_rates = self.source_rates or [[] for _ in self.drafts]

    def forward_sizes(self) -> dict[int, int]:
        """Tokens of a verifying forward -> forwards, whatever their rows."""
        out: dict[int, int] = {}
        for (_, n), count in self.forward_shapes.items():
            out[n] = out.get(n, 0) + count
        return out

    def acceptance(self) -> dict[str, float | None]:
        """Mean acceptance rate of each draft's drafts and of the voted drafts."""
        out: dict[str, float | None] = {
            name: (sum(r) / len(r) if r else None)
            for name, r in zip(self.drafts, self.source_rates, strict=True)
        }
        out["voted"] = sum(self.voted_rates) / len(self.voted_rates) if self.voted_rates else None
        return out

    def as_extras(self, learner: Learner) -> dict[str, Any]:
        """JSON data for a response's ``extras``: this record and what ``learner`` holds now
        (the weights, the selector's ``s`` history, the gate's rounds per draft)."""

        def by_draft(values: Sequence[Any]) -> dict[str, Any]:
            return dict(zip(self.drafts, values, strict=False))

        gate, selector = learner.gate, learner.selector
        return {
            "drafts": list(self.drafts),
            "acceptance_by_draft": {
                k: None if v is None else round(v, 4) for k, v in self.acceptance().items()
            },
            "weights": by_draft([round(w, 3) for w in learner.weights.weights]),
            "s_history": list(selector.history) if selector is not None else [],
            "verifications": self.verifications,
            "rounds_drafting": by_draft(gate.rounds_on if gate is not None else []),
            "rounds_exploring": by_draft(gate.rounds_explored if gate is not None else []),
            "predrafts_used": self.predrafts_used,
            "predrafts_wasted": self.predrafts_wasted,
            "pipelined_rounds": None if self.pipeline is None else self.pipeline.rounds[True],
            "pipeline_probes": 0 if self.pipeline is None else self.pipeline.probes,
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "forward_sizes": {str(n): k for n, k in sorted(self.forward_sizes().items())},
            "forward_shapes": {f"{r}x{n}": k for (r, n), k in sorted(self.forward_shapes.items())},
            "forward_shape_ms": {f"{r}x{n}": round(ms, 2) for (r, n), ms in sorted(self.forward_ms.items())},
            "split_pairs": learner.judge.pairs(),  # the split judge's latest pairs per size
            "prefill_s": round(self.prefill_s, 4),
            "longest_draft": list(self.longest_draft),
            "voted_from": list(self.voted_from),
        }


@dataclass
class Request:
    key: int
    prompt: list[int]
    seq: Seq
    draws: PositionDraws
    stats: DecodeStats
    context: list[int] = field(default_factory=list)  # prompt + output; its last is pending
    tokens: list[int] = field(default_factory=list)  # the output so far
    finish_reason: str | None = None
    reported: int = 0  # output tokens already streamed
    budget: int | None = None  # this request's own token budget (None: the config's)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None


@dataclass(frozen=True)
class Voted:
    """A round's drafts for one request: one per drafter, the voted one, its drafter (-1:
    none), and the voted drafter's next token after it (the pipeline's guess of the
    target's bonus token, or None)."""

    drafts: list[list[int]]
    draft: list[int]
    voter: int
    guess: int | None = None


NO_DRAFT = Voted([], [], -1)


@dataclass(frozen=True)
class Feedback:
    """What the target produced after a request's context, for the drafters that drafted."""

    key: int
    context: list[int]
    produced: list[int]
    drafters: list[int]


def new_request(
    target: SteerableModel, key: int, prompt: Sequence[int], sampling: SamplingParams, start: float
) -> Request:
    seed = None if sampling.seed is None else sampling.seed + key
    stats = DecodeStats(prompt_tokens=len(prompt), start=start)
    return Request(key, list(prompt), target.new_sequence(), PositionDraws(seed), stats)


def prefill(
    target: SteerableModel,
    joining: list[Request],
    sampling: SamplingParams,
    max_tokens: int,
    gate: SourceGate | None = None,
    run: RunRecord | None = None,
    running: Sequence[Request] = (),
) -> None:
    """Read the new prompts in one batch and sample each one's first token; the
    ``running`` requests that wait meanwhile count the time as stalled."""
    t0 = time.perf_counter()
    items = [(r.seq, r.prompt) for r in joining]
    if sampling.greedy:  # one id per prompt comes back, not a vocabulary of logits
        firsts = [int(c) for c in target.extend_many_greedy(items)]
    else:
        rows = target.extend_many(items, last_only=True)
        firsts = [
            sample_at(probs_from_logits(logits[-1], sampling), r.draws.uniform(len(r.prompt)))
            for r, logits in zip(joining, rows, strict=True)
        ]
    seconds = time.perf_counter() - t0
    for r in running:
        if r.stats.first_token_at is not None and not r.done:
            r.stats.stalled_s += seconds
    if gate is not None:
        gate.prefilled(len(joining), seconds)
    if run is not None:
        run.prefill_s += seconds
    for r, first in zip(joining, firsts, strict=True):
        r.context = [*r.prompt]
        r.stats.prefilled()
        take(target, r, [first], max_tokens)


def draft_and_vote(
    target: SteerableModel,
    drafts: Sequence[Drafter],
    sizers: Sequence[DraftSizer | None],
    contexts: list[tuple[int, list[int]]],
    s: int,
    weights: Sequence[float],
    *,
    guess: bool = False,
    gate: SourceGate | None = None,
    own_lengths: bool = True,
) -> list[Voted]:
    """The drafters' drafts after every (key, context): at most ``s`` tokens, fewer near
    the end of the window; the vote among them per request. A drafter with a sizer (one
    that calls no model) drafts, with ``own_lengths``, as far as its sizer asks, and is
    cut to what its kind of draft has earned: a copy that holds is not stopped at ``s``.
    One request alone is cut as the speculative engine cuts it; a batch's drafts are cut
    together, since one request's long draft makes every request's verification dearer
    (``DraftSizer.cut_together``). With a ``gate``, each drafter
    drafts only for the requests the gate plans for it (the others get none). With
    ``guess``, drafters draft one token more, kept as the voted draft's guess of the
    target's next token."""
    window = [window_room(len(c), target.n_ctx) for _, c in contexts]
    room = [min(s, w) for w in window]
    k = max(room, default=0)
    own_k = [sizer.next_k() if sizer is not None and own_lengths else 0 for sizer in sizers]
    if k == 0 and not any(own_k):
        return [NO_DRAFT for _ in contexts]
    caps = [[min(n, w) for w in window] if n else room for n in own_k]
    keys = [key for key, _ in contexts]
    plans = gate.plan(keys, k) if gate is not None else [list(range(len(contexts)))] * len(drafts)
    drafted = [
        _propose(d, sizer, i, contexts, plan, max(caps[i], default=0) + guess, gate)
        for i, (d, sizer, plan) in enumerate(zip(drafts, sizers, plans, strict=True))
    ]
    out = []
    for j in range(len(contexts)):
        own = [d[j][: cap[j]] for d, cap in zip(drafted, caps, strict=True)]
        vote = majority_vote(own, weights)
        if guess and vote.voter >= 0:
            at = caps[vote.voter][j]
            after = drafted[vote.voter][j][at : at + 1]
        else:
            after = []
        out.append(Voted(own, vote.tokens, vote.voter, after[0] if after else None))
    return out


def _propose(
    drafter: Drafter,
    sizer: DraftSizer | None,
    index: int,
    contexts: list[tuple[int, list[int]]],
    plan: list[int],
    k: int,
    gate: SourceGate | None,
) -> list[list[int]]:
    """Drafter ``index``'s drafts for the planned contexts (the others get none), each cut
    by its ``sizer`` if it has one; the gate learns what they cost."""
    out: list[list[int]] = [[] for _ in contexts]
    chosen = [contexts[j] for j in plan]
    if not chosen:
        return out
    t0 = time.perf_counter()
    if sizer is None:
        drafts = [d.tokens for d in drafter.propose_many(chosen, k)]
    elif len(contexts) == 1:
        drafts = [_sized(drafter, sizer, key, context, k) for key, context in chosen]
    else:
        drafts = _sized_together(drafter, sizer, chosen, k, len(contexts) - len(chosen))
    if gate is not None:
        gate.drafted(index, [key for key, _ in chosen], time.perf_counter() - t0, drafts)
    for j, d in zip(plan, drafts, strict=True):
        out[j] = d
    return out


def _sized(drafter: Drafter, sizer: DraftSizer, key: int, context: list[int], k: int) -> list[int]:
    """One request's draft, cut to the length its kind of draft has earned."""
    sizer.learn(key, context)
    return sizer.cut(key, len(context), drafter.propose_many([(key, context)], k)[0]).tokens


def _sized_together(
    drafter: Drafter, sizer: DraftSizer, chosen: list[tuple[int, list[int]]], k: int, others: int
) -> list[list[int]]:
    """Drafts for a batch's requests, cut together: the forward's draft tokens are the ones
    worth their cost in it (``DraftSizer.cut_together``); ``others``: the batch's requests
    this drafter drafts nothing for, each a row of the forward all the same."""
    for key, context in chosen:
        sizer.learn(key, context)
    proposed = drafter.propose_many(chosen, k)
    items = [(key, len(context), d) for (key, context), d in zip(chosen, proposed, strict=True)]
    return [d.tokens for d in sizer.cut_together(items, others)]


class Learner:
    """What every verification teaches: the drafts' weights, the selector's s, the sizers'
    costs, the gate's record and the run's record of acceptance."""

    def __init__(
        self,
        weights: VoteWeights,
        selector: SpeculationLengthSelector | None,
        fixed_s: int,
        sampling: SamplingParams,
        max_tokens: int,
        gate: SourceGate | None,
        drafts: Sequence[Drafter],
        sizers: Sequence[DraftSizer | None],
        *,
        own_lengths: bool = False,
        costs: CostCurve | None = None,
        judge: SplitJudge | None = None,
    ) -> None:
        self.weights = weights
        self.selector = selector
        self.fixed_s = fixed_s
        self.sampling = sampling
        self.max_tokens = max_tokens
        self.gate = gate
        self.drafts = drafts
        self.sizers = sizers
        self.own_lengths = own_lengths  # sized drafters draft past s (``draft_and_vote``)
        # seconds of a target forward over n tokens, whatever its requests: the sizers' curve
        self.costs = costs if costs is not None else CostCurve()
        # whether a proposed split pays, by paired measurements (the target's, ``split_judge``)
        self.judge = judge if judge is not None else SplitJudge()

    @property
    def s(self) -> int:
        return self.selector.s if self.selector is not None else self.fixed_s

    def use_costs(self, costs: CostCurve, judge: SplitJudge) -> None:
        """Measure and price the target's forwards by ``costs``, and split them by
        ``judge``, from now on, the sizers' drafts too: the pipeline's pipelined phases
        verify on fewer cores than its sequential rounds, so each kind of phase keeps its
        own (``pipeline.run_pipelined``)."""
        self.costs, self.judge = costs, judge
        for sizer in self.sizers:
            if sizer is not None and isinstance(sizer.policy, AdaptiveDraftLength):
                sizer.policy.costs = costs

    def forget(self, key: int) -> None:
        """The request ``key`` is finished: the drafters, sizers and gate drop what they kept."""
        for d, sizer in zip(self.drafts, self.sizers, strict=True):
            d.forget(key)
            if sizer is not None:
                sizer.forget(key)
        if self.gate is not None:
            self.gate.forget(key)

    def feed(self, events: Sequence[Feedback]) -> None:
        """Tell each drafter what the target produced after the contexts it drafted for."""
        for e in events:
            for i in e.drafters:
                self.drafts[i].feedback(e.key, e.context, e.produced)

    def verify(
        self,
        target: SteerableModel,
        batch: list[tuple[Request, Voted]],
        run: RunRecord,
        draft_s: float = 0.0,
    ) -> list[Feedback]:
        """One batched target forward over every request's pending token and voted draft;
        what each request gained, for the drafters (``feed``). ``draft_s``: the drafting
        time on the round's critical path (0 when drafting ran beside the target), which
        the selector counts with the verification's."""
        items = [(r.seq, [r.context[-1], *v.draft]) for r, v in batch]
        tokens = sum(len(ids) for _, ids in items)  # the verification's, however many forwards
        rows: list[Any] = []
        verify_s = 0.0
        parts = self._forwards(items)
        greedy = self.sampling.greedy  # then each row's choice comes back, not its logits
        for part in parts:
            t0 = time.perf_counter()
            rows += target.extend_many_choices(part) if greedy else target.extend_many(part)
            elapsed = time.perf_counter() - t0
            verify_s += elapsed
            shape = (len(part), sum(len(ids) for _, ids in part))
            run.forward_shapes[shape] = run.forward_shapes.get(shape, 0) + 1
            run.forward_ms[shape] = run.forward_ms.get(shape, 0.0) + 1000 * elapsed
        self._observe(tokens, verify_s)
        self.judge.measured(tokens, split=len(parts) > 1, seconds=verify_s)
        if self.gate is not None:
            self.gate.verified(tokens, verify_s)
        events = []
        for (r, v), out in zip(batch, rows, strict=True):
            if greedy:
                n_acc, nxt = accept_choices(v.draft, out)
            else:
                n_acc, nxt = accept_deterministic(v.draft, out, self.sampling, r.draws, len(r.context))
            target.truncate(r.seq, len(r.context) + n_acc)
            produced = [*v.draft[:n_acc], nxt]
            self.weights.record(v.drafts, v.voter, produced)
            _score(run, v, produced, n_acc, self.gate)
            r.stats.verified(len(v.draft), n_acc)
            drafters = [i for i, d in enumerate(v.drafts) if d]
            events.append(Feedback(r.key, list(r.context), produced, drafters))
            take(target, r, produced, self.max_tokens)
        self.weights.update()
        run.verifications += 1
        run.verify_s += verify_s
        run.longest_draft.append(max((len(v.draft) for _, v in batch), default=0))
        if self.selector is not None:
            gained = sum(len(e.produced) for e in events) / len(events)
            self.selector.observe(draft_s + verify_s, gained)
        return events

    def _forwards(self, items: list[tuple[Seq, list[int]]]) -> list[list[tuple[Seq, list[int]]]]:
        """The verification's items in one forward, or in two
        where a cut is proposed and forwards over as many tokens, split and whole a few
        verifications apart, say it pays (``split.planned_cut``)."""
        at = planned_cut([len(ids) for _, ids in items], self.costs, self.judge)
        if not at:
            return [items]
        return [items[:at], items[at:]]

    def _observe(self, n_tokens: int, seconds: float) -> None:
        """A verification's cost, one forward or two, into the shared curve: through the
        sizers, whose policies keep it (and count their rounds by it), or directly when
        there are none. The curve is what verifying n tokens costs as the judge runs it,
        which the sizers price drafts by; a split's parts are not points of their own:
        recorded so, a batch of 8 split into 4 + 4 never measured 8 again, its point went
        stale, and the sizers drafted nothing (``docs/bench/collective``, run G)."""
        sizers = [sizer for sizer in self.sizers if sizer is not None]
        for sizer in sizers:
            sizer.observe(drafted=n_tokens - 1, draft_s=0.0, verify_s=seconds)
        if not sizers:
            self.costs.record(n_tokens, seconds, SMOOTHING, REFRESH)


def _score(run: RunRecord, v: Voted, produced: list[int], n_acc: int, gate: SourceGate | None) -> None:
    """Every drafter's draft, and the voted one, against what the target produced."""
    for i, d in enumerate(v.drafts):
        if d:
            held = held_prefix(d, produced)
            run.source_rates[i].append(held / len(d))
            if gate is not None:
                gate.scored(i, len(d), held, len(produced))
    if v.draft:
        run.voted_rates.append(n_acc / len(v.draft))
        run.voted_from.append(v.voter)


def take(target: SteerableModel, r: Request, new: list[int], max_tokens: int) -> None:
    """Append the decided tokens; finish the request at an end, its budget or the window."""
    budget = r.budget if r.budget is not None else max_tokens
    kept, finished = take_round(new, r.context, target, budget - len(r.tokens))
    r.tokens.extend(kept)
    r.stats.emitted(len(kept))
    r.finish_reason = finished


@dataclass
class Session:
    """One call of the engine: the target, the drafters, the settings, what every
    verification teaches (``learner``), the run's record, and when it started."""

    target: SteerableModel
    drafts: Sequence[Drafter]
    config: CollectiveConfig
    learner: Learner
    record: RunRecord
    start: float
    budgets: dict[int, int] = field(default_factory=dict)  # arrivals' own budgets, by key
    learned: Learned = field(default_factory=Learned)  # what the run's models taught (a session's)

    def admit(self, pending: deque[tuple[int, list[int]]], running: Sequence[Request]) -> list[Request]:
        """Pending requests that fit beside the ``running`` ones, prefilled together (each
        with its first token; one may be done at once)."""
        joining: list[Request] = []
        while pending and len(running) + len(joining) < self.config.max_batch:
            key, prompt = pending.popleft()
            joining.append(new_request(self.target, key, prompt, self.config.sampling, self.start))
            if key in self.budgets:  # an arrival: its own budget, its draws from the seed itself
                joining[-1].budget = self.budgets.pop(key)
                joining[-1].draws = PositionDraws(self.config.sampling.seed)
        if joining:
            config = self.config
            gate, record = self.learner.gate, self.record
            prefill(self.target, joining, config.sampling, config.max_tokens, gate, record, running)
        return joining

    def round(self, live: list[Request]) -> None:
        """One sequential round for the ``live`` requests: draft and vote, then verify with
        the drafting on the round's critical path, and tell the drafters what was kept."""
        t0 = time.perf_counter()
        votes = self.draft([(r.key, r.context) for r in live])
        draft_s = time.perf_counter() - t0
        self.record.draft_s += draft_s
        batch = list(zip(live, votes, strict=True))
        self.learner.feed(self.learner.verify(self.target, batch, self.record, draft_s))

    def draft(
        self,
        contexts: list[tuple[int, list[int]]],
        *,
        guess: bool = False,
        s: int | None = None,
        weights: Sequence[float] | None = None,
    ) -> list[Voted]:
        """Every drafter's drafts after the contexts, voted per request; ``s`` and the
        weights are the learner's now unless given (a snapshot taken under a lock)."""
        learner = self.learner
        return draft_and_vote(
            self.target,
            self.drafts,
            learner.sizers,
            contexts,
            learner.s if s is None else s,
            learner.weights.weights if weights is None else weights,
            guess=guess,
            gate=learner.gate,
            own_lengths=learner.own_lengths,
        )
