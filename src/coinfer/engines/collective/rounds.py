"""The steps of a collective round, shared by the sequential and the pipelined engine.

A request's ``context`` is its prompt and the tokens decided so far; the last of them is
*pending*: chosen, but not yet in the target's cache. A round drafts after the context,
votes, sends ``[pending, *voted draft]`` to the target, keeps the accepted prefix and the
target's own next token, and rolls the rest back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.decoding.speculative import accept_deterministic, emit_tokens
from coinfer.engines.collective.gate import SourceGate
from coinfer.engines.collective.selector import SpeculationLengthSelector
from coinfer.engines.collective.sources import DraftSource
from coinfer.engines.collective.voting import VoteWeights, held_prefix, majority_vote
from coinfer.models.base import Seq, SteerableModel

__all__ = ["CollectiveRun", "Learner", "Request", "RequestResult", "Voted"]


@dataclass
class RequestResult:
    """One request's output and what its rounds did."""

    tokens: list[int]
    text: str
    finish_reason: str
    prompt_tokens: int
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per verification: 1 + accepted / rounds."""
        return 1.0 + self.accepted / self.rounds if self.rounds else 0.0


@dataclass
class CollectiveRun:
    """All requests' results and the engine's own record."""

    results: list[RequestResult]
    sources: list[str]
    wall_s: float = 0.0
    draft_s: float = 0.0  # drafting and voting (overlapped with verifying when pipelined)
    verify_s: float = 0.0
    verifications: int = 0  # batched target forwards after the prefills
    longest_draft: list[int] = field(default_factory=list)  # per verification: its longest voted draft
    s_history: list[int] = field(default_factory=list)  # the selector's s after each of its decisions
    weights: list[float] = field(default_factory=list)
    source_rates: list[list[float]] = field(default_factory=list)  # per source, per draft it made
    voted_rates: list[float] = field(default_factory=list)  # per verified non-empty voted draft
    voted_from: list[int] = field(default_factory=list)  # per verified voted draft: its source
    rounds_on: list[int] = field(default_factory=list)  # per source: rounds it drafted for all (gated)
    rounds_explored: list[int] = field(default_factory=list)  # per source: rounds it drafted for one
    predrafts_used: int = 0  # pipelined: drafts made during the verification they assumed
    predrafts_wasted: int = 0

    @property
    def output_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.wall_s if self.wall_s else 0.0

    def acceptance(self) -> dict[str, float | None]:
        """Mean acceptance rate of each source's drafts and of the voted drafts."""
        out: dict[str, float | None] = {
            name: (sum(r) / len(r) if r else None)
            for name, r in zip(self.sources, self.source_rates, strict=True)
        }
        out["voted"] = sum(self.voted_rates) / len(self.voted_rates) if self.voted_rates else None
        return out


@dataclass
class Request:
    key: int
    prompt: list[int]
    seq: Seq
    draws: PositionDraws
    result: RequestResult
    context: list[int] = field(default_factory=list)  # prompt + output; its last is pending

    @property
    def done(self) -> bool:
        return bool(self.result.finish_reason)


@dataclass(frozen=True)
class Voted:
    """A round's drafts for one request: one per source, the voted one, its source (-1:
    none), and the voted source's next token after it (the pipeline's guess of the
    target's bonus token, or None)."""

    drafts: list[list[int]]
    draft: list[int]
    voter: int
    guess: int | None = None


NO_DRAFT = Voted([], [], -1)


def new_request(target: SteerableModel, key: int, prompt: Sequence[int], sampling: SamplingParams) -> Request:
    seed = None if sampling.seed is None else sampling.seed + key
    result = RequestResult([], "", "", len(prompt))
    return Request(key, list(prompt), target.new_sequence(), PositionDraws(seed), result)


def prefill(
    target: SteerableModel,
    joining: list[Request],
    sampling: SamplingParams,
    max_tokens: int,
    gate: SourceGate | None = None,
) -> None:
    """Read the new prompts in one batch and sample each one's first token."""
    t0 = time.perf_counter()
    rows = target.extend_many([(r.seq, r.prompt) for r in joining], last_only=True)
    if gate is not None:
        gate.prefilled(len(joining), time.perf_counter() - t0)
    for r, logits in zip(joining, rows, strict=True):
        first = sample_at(probs_from_logits(logits[-1], sampling), r.draws.uniform(len(r.prompt)))
        r.context = [*r.prompt]
        take(target, r, [first], max_tokens)


def draft_and_vote(
    target: SteerableModel,
    sources: Sequence[DraftSource],
    contexts: list[tuple[int, list[int]]],
    s: int,
    weights: Sequence[float],
    *,
    guess: bool = False,
    gate: SourceGate | None = None,
) -> list[Voted]:
    """The sources' drafts after every (key, context): at most ``s`` tokens, fewer near
    the end of the window; the vote among them per request. With a ``gate``, each source
    drafts only for the requests the gate plans for it (the others get none). With
    ``guess``, sources draft one token more, kept as the voted draft's guess of the
    target's next token."""
    room = [max(0, min(s, target.n_ctx - len(c) - 2)) for _, c in contexts]
    k = max(room, default=0)
    if k == 0:
        return [NO_DRAFT for _ in contexts]
    keys = [key for key, _ in contexts]
    plans = gate.plan(keys, k) if gate is not None else [list(range(len(contexts)))] * len(sources)
    pairs = enumerate(zip(sources, plans, strict=True))
    drafted = [_propose(src, i, contexts, plan, k + guess, gate) for i, (src, plan) in pairs]
    out = []
    for j in range(len(contexts)):
        own = [d[j][: room[j]] for d in drafted]
        vote = majority_vote(own, weights)
        after = drafted[vote.voter][j][room[j] : room[j] + 1] if guess and vote.voter >= 0 else []
        out.append(Voted(own, vote.tokens, vote.voter, after[0] if after else None))
    return out


def _propose(
    src: DraftSource,
    index: int,
    contexts: list[tuple[int, list[int]]],
    plan: list[int],
    k: int,
    gate: SourceGate | None,
) -> list[list[int]]:
    """Source ``index``'s drafts for the planned contexts (the others get none); the gate
    learns what they cost."""
    out: list[list[int]] = [[] for _ in contexts]
    chosen = [contexts[j] for j in plan]
    if not chosen:
        return out
    t0 = time.perf_counter()
    drafts = src.propose_many(chosen, k)
    if gate is not None:
        gate.drafted(index, [key for key, _ in chosen], time.perf_counter() - t0, drafts)
    for j, d in zip(plan, drafts, strict=True):
        out[j] = d
    return out


class Learner:
    """What every verification teaches: the sources' weights, the selector's s, and the
    run's record of acceptance."""

    def __init__(
        self,
        weights: VoteWeights,
        selector: SpeculationLengthSelector | None,
        fixed_s: int,
        sampling: SamplingParams,
        max_tokens: int,
        gate: SourceGate | None = None,
        sources: Sequence[DraftSource] = (),
    ) -> None:
        self.weights = weights
        self.sources = sources
        # sources that learn the target's cost per request: observe(drafted, seconds)
        self._observers = [src.observe for src in sources if callable(getattr(src, "observe", None))]
        self.selector = selector
        self.fixed_s = fixed_s
        self.sampling = sampling
        self.max_tokens = max_tokens
        self.gate = gate

    @property
    def s(self) -> int:
        return self.selector.s if self.selector is not None else self.fixed_s

    def forget(self, key: int) -> None:
        """The request ``key`` is finished: the sources and the gate drop what they kept."""
        for src in self.sources:
            src.forget(key)
        if self.gate is not None:
            self.gate.forget(key)

    def verify(
        self,
        target: SteerableModel,
        batch: list[tuple[Request, Voted]],
        run: CollectiveRun,
        draft_s: float = 0.0,
    ) -> list[list[int]]:
        """One batched target forward over every request's pending token and voted draft;
        the tokens each request gained (its accepted drafts and the target's next).
        ``draft_s``: the drafting time on the round's critical path (0 when drafting ran
        beside the target), which the selector counts with the verification's."""
        t0 = time.perf_counter()
        items = [(r.seq, [r.context[-1], *v.draft]) for r, v in batch]
        rows = target.extend_many(items)
        verify_s = time.perf_counter() - t0
        if self.gate is not None:
            self.gate.verified(sum(len(ids) for _, ids in items), verify_s)
        for observe in self._observers:
            for _, v in batch:
                observe(len(v.draft), verify_s / len(batch))
        gained = []
        for (r, v), logits in zip(batch, rows, strict=True):
            n_acc, nxt = accept_deterministic(v.draft, logits, self.sampling, r.draws, len(r.context))
            target.truncate(r.seq, len(r.context) + n_acc)
            produced = [*v.draft[:n_acc], nxt]
            self.weights.record(v.drafts, v.voter, produced)
            _score(run, v, produced, n_acc, self.gate)
            r.result.rounds += 1
            r.result.drafted += len(v.draft)
            r.result.accepted += n_acc
            gained.append(produced)
            take(target, r, produced, self.max_tokens)
        self.weights.update()
        run.verifications += 1
        run.verify_s += verify_s
        run.longest_draft.append(max((len(v.draft) for _, v in batch), default=0))
        if self.selector is not None:
            self.selector.observe(draft_s + verify_s, sum(map(len, gained)) / len(gained))
        return gained


def _score(run: CollectiveRun, v: Voted, produced: list[int], n_acc: int, gate: SourceGate | None) -> None:
    """Every source's draft, and the voted one, against what the target produced."""
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
    kept, finished = emit_tokens(new, target.eos_ids, max_tokens - len(r.result.tokens))
    r.context.extend(kept)
    r.result.tokens.extend(kept)
    if not finished and len(r.context) + 1 >= target.n_ctx:
        finished = "length"
    if finished:
        r.result.finish_reason = finished
        r.result.text = target.detokenize(r.result.tokens)
