"""The collective engine: many requests, several draft sources, one target (paper 001).

Requests wait in a pending pool and run, up to ``max_batch`` at a time, in a running
pool. Each round:

1. every source drafts ``s`` tokens for every running request (a model source in one
   batch per step);
2. per request, the drafts are merged by the weighted majority vote (``voting``);
3. the target verifies every request's voted draft in one batched forward
   (``extend_many``): greedy, or sampled with one uniform per position so that any
   choice of drafts gives the target's own text (``verify.coupled_accept``);
4. every draft is scored against what the target produced, the sources' weights are
   rewarded or punished, and ``s`` for the next round comes from the speculation length
   selector (or stays fixed).

A request leaves the running pool at its end-of-generation token, its token budget or
the context's end; a pending one takes its place, prefilled in one batch with the others
joining. ``s = 0`` is plain batched decoding.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from coinfer.decoding.generate import check_prompt
from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.decoding.speculative import emit_tokens
from coinfer.decoding.verify import coupled_accept, greedy_accept
from coinfer.engines.collective.selector import LengthSelectorConfig, SpeculationLengthSelector
from coinfer.engines.collective.sources import DraftSource
from coinfer.engines.collective.voting import VoteConfig, VoteWeights, held_prefix, majority_vote
from coinfer.errors import ConfigError
from coinfer.models.base import Seq, SteerableModel

__all__ = ["CollectiveConfig", "CollectiveRun", "RequestResult", "collective_generate"]


@dataclass(frozen=True)
class CollectiveConfig:
    """``draft_tokens``: a fixed s, or the selector's settings to choose s online."""

    max_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_tokens: int | LengthSelectorConfig = field(default_factory=LengthSelectorConfig)
    vote: VoteConfig = field(default_factory=VoteConfig)
    max_batch: int = 8

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or self.max_batch < 1:
            raise ConfigError("need max_tokens >= 1 and max_batch >= 1")
        if isinstance(self.draft_tokens, int) and self.draft_tokens < 0:
            raise ConfigError(f"draft_tokens must be >= 0, got {self.draft_tokens}")


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
    draft_s: float = 0.0
    verify_s: float = 0.0
    verifications: int = 0  # batched target forwards after the prefills
    s_history: list[int] = field(default_factory=list)  # s used by each round
    weights: list[float] = field(default_factory=list)
    source_rates: list[list[float]] = field(default_factory=list)  # per source, per draft it made
    voted_rates: list[float] = field(default_factory=list)  # per verified non-empty voted draft
    voted_from: list[int] = field(default_factory=list)  # per round and request: the voted source

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
class _Request:
    key: int
    prompt: list[int]
    seq: Seq
    draws: PositionDraws
    result: RequestResult
    context: list[int] = field(default_factory=list)  # prompt + output; its last is pending

    @property
    def done(self) -> bool:
        return bool(self.result.finish_reason)


def collective_generate(
    target: SteerableModel,
    sources: Sequence[DraftSource],
    prompts: Sequence[Sequence[int]],
    config: CollectiveConfig = CollectiveConfig(),  # noqa: B008 (frozen)
) -> CollectiveRun:
    """Generate for every prompt; results in the prompts' order."""
    if not sources and config.draft_tokens != 0:
        raise ConfigError("collective speculation needs at least one draft source (or draft_tokens=0)")
    for prompt in prompts:
        check_prompt(target, prompt)
    run = CollectiveRun([], [s.name for s in sources], source_rates=[[] for _ in sources])
    weights = VoteWeights(max(1, len(sources)), config.vote)
    selector = None
    if isinstance(config.draft_tokens, LengthSelectorConfig):
        selector = SpeculationLengthSelector(config.draft_tokens)
    results: dict[int, RequestResult] = {}
    pending = deque(enumerate(prompts))
    running: list[_Request] = []
    started = time.perf_counter()
    try:
        while pending or running:
            joining = []
            while pending and len(running) + len(joining) < config.max_batch:
                key, prompt = pending.popleft()
                seed = config.sampling.seed
                draws = PositionDraws(None if seed is None else seed + key)
                result = RequestResult([], "", "", len(prompt))
                joining.append(_Request(key, list(prompt), target.new_sequence(), draws, result))
            if joining:
                _prefill(target, joining, config)
                running += joining
            s = selector.s if selector is not None else int(config.draft_tokens)  # type: ignore[arg-type]
            live = [r for r in running if not r.done]
            if live:
                _round(target, sources, live, s, config, weights, selector, run)
            for r in running:
                if r.done:
                    results[r.key] = r.result
                    target.release(r.seq)
                    for src in sources:
                        src.forget(r.key)
            running = [r for r in running if not r.done]
    finally:
        for r in running:
            target.release(r.seq)
    run.results = [results[k] for k in range(len(prompts))]
    run.weights = list(weights.weights)
    run.wall_s = time.perf_counter() - started
    return run


def _prefill(target: SteerableModel, joining: list[_Request], config: CollectiveConfig) -> None:
    """Read the new prompts in one batch and sample each one's first token."""
    rows = target.extend_many([(r.seq, r.prompt) for r in joining], last_only=True)
    for r, logits in zip(joining, rows, strict=True):
        probs = probs_from_logits(logits[-1], config.sampling)
        first = sample_at(probs, r.draws.uniform(len(r.prompt)))
        r.context = [*r.prompt]
        _take(target, r, [first], config)


def _round(
    target: SteerableModel,
    sources: Sequence[DraftSource],
    live: list[_Request],
    s: int,
    config: CollectiveConfig,
    weights: VoteWeights,
    selector: SpeculationLengthSelector | None,
    run: CollectiveRun,
) -> None:
    """Draft, vote, verify in one batch, score, and pick the next s."""
    t0 = time.perf_counter()
    votes = _draft_and_vote(target, sources, live, s, weights)
    t1 = time.perf_counter()
    batch = [(r.seq, [r.context[-1], *v.draft]) for r, v in zip(live, votes, strict=True)]
    rows = target.extend_many(batch)
    verify_s = time.perf_counter() - t1
    gained = []
    for r, v, logits in zip(live, votes, rows, strict=True):
        n_acc, nxt = _accept(v.draft, logits, r, config.sampling)
        target.truncate(r.seq, len(r.context) + n_acc)
        produced = [*v.draft[:n_acc], nxt]
        weights.record(v.drafts, v.voter, produced)
        _score(run, v, produced, n_acc)
        r.result.rounds += 1
        r.result.drafted += len(v.draft)
        r.result.accepted += n_acc
        gained.append(n_acc + 1)
        _take(target, r, produced, config)
    weights.update()
    run.verifications += 1
    run.s_history.append(s)
    run.draft_s += t1 - t0
    run.verify_s += verify_s
    if selector is not None:
        selector.observe(verify_s, sum(gained) / len(gained))


@dataclass(frozen=True)
class _Voted:
    drafts: list[list[int]]  # one per source
    draft: list[int]  # the majority-approved one
    voter: int  # its source (-1: no draft)


def _draft_and_vote(
    target: SteerableModel, sources: Sequence[DraftSource], live: list[_Request], s: int, weights: VoteWeights
) -> list[_Voted]:
    """Every source's drafts for every live request (at most ``s`` tokens, fewer near the
    end of the window), and the vote among them per request."""
    room = [max(0, min(s, target.n_ctx - len(r.context) - 1)) for r in live]
    k = max(room, default=0)
    if k == 0:
        return [_Voted([], [], -1) for _ in live]
    contexts = [(r.key, r.context) for r in live]
    drafted = [src.propose_many(contexts, k) for src in sources]
    out = []
    for j in range(len(live)):
        own = [d[j][: room[j]] for d in drafted]
        vote = majority_vote(own, weights.weights)
        out.append(_Voted(own, vote.tokens, vote.voter))
    return out


def _accept(draft: list[int], rows: np.ndarray, r: _Request, sampling: SamplingParams) -> tuple[int, int]:
    """(accepted count, next token) of one request's verified draft."""
    if sampling.greedy:
        return greedy_accept(draft, rows)
    probs = np.stack([probs_from_logits(row, sampling) for row in rows])
    at = len(r.context)  # the position the first row predicts
    return coupled_accept(draft, probs, [r.draws.uniform(at + i) for i in range(len(rows))])


def _score(run: CollectiveRun, v: _Voted, produced: list[int], n_acc: int) -> None:
    """Every source's draft, and the voted one, against what the target produced."""
    for i, d in enumerate(v.drafts):
        if d:
            run.source_rates[i].append(held_prefix(d, produced) / len(d))
    if v.draft:
        run.voted_rates.append(n_acc / len(v.draft))
        run.voted_from.append(v.voter)


def _take(target: SteerableModel, r: _Request, new: list[int], config: CollectiveConfig) -> None:
    """Append the decided tokens; finish the request at an end, its budget or the window."""
    kept, finished = emit_tokens(new, target.eos_ids, config.max_tokens - len(r.result.tokens))
    r.context.extend(kept)
    r.result.tokens.extend(kept)
    if not finished and len(r.context) + 1 >= target.n_ctx:
        finished = "length"
    if finished:
        r.result.finish_reason = finished
        r.result.text = target.detokenize(r.result.tokens)
