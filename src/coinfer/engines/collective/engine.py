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
joining. ``s = 0`` is plain batched decoding. With ``pipeline=True`` drafting and
verifying run at the same time (``pipeline``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from coinfer.decoding.generate import check_prompt
from coinfer.decoding.sampling import SamplingParams
from coinfer.engines.collective.rounds import (
    CollectiveRun,
    Learner,
    Request,
    RequestResult,
    draft_and_vote,
    new_request,
    prefill,
)
from coinfer.engines.collective.selector import LengthSelectorConfig, SpeculationLengthSelector
from coinfer.engines.collective.sources import DraftSource
from coinfer.engines.collective.voting import VoteConfig, VoteWeights
from coinfer.errors import ConfigError
from coinfer.models.base import SteerableModel

__all__ = ["CollectiveConfig", "collective_generate"]


@dataclass(frozen=True)
class CollectiveConfig:
    """``draft_tokens``: a fixed s, or the selector's settings to choose s online;
    ``pipeline``: draft on another thread while the target verifies."""

    max_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_tokens: int | LengthSelectorConfig = field(default_factory=LengthSelectorConfig)
    vote: VoteConfig = field(default_factory=VoteConfig)
    max_batch: int = 8
    pipeline: bool = False
    draft_threads: int = 1  # pipelined: CPU threads (and cores) for the drafts; the target gets the rest

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or self.max_batch < 1 or self.draft_threads < 1:
            raise ConfigError("need max_tokens, max_batch and draft_threads >= 1")
        if isinstance(self.draft_tokens, int) and self.draft_tokens < 0:
            raise ConfigError(f"draft_tokens must be >= 0, got {self.draft_tokens}")


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
    learner = _learner(len(sources), config)
    started = time.perf_counter()
    if config.pipeline and sources:
        from coinfer.engines.collective.pipeline import run_pipelined

        results = run_pipelined(target, sources, prompts, config, learner, run)
    else:
        results = _run_sequential(target, sources, prompts, config, learner, run)
    run.results = [results[k] for k in range(len(prompts))]
    run.weights = list(learner.weights.weights)
    if learner.selector is not None:
        run.s_history = list(learner.selector.history)
    run.wall_s = time.perf_counter() - started
    return run


def _learner(n_sources: int, config: CollectiveConfig) -> Learner:
    weights = VoteWeights(max(1, n_sources), config.vote)
    if isinstance(config.draft_tokens, LengthSelectorConfig):
        selector, fixed = SpeculationLengthSelector(config.draft_tokens), 0
    else:
        selector, fixed = None, config.draft_tokens
    return Learner(weights, selector, fixed, config.sampling, config.max_tokens)


def _run_sequential(
    target: SteerableModel,
    sources: Sequence[DraftSource],
    prompts: Sequence[Sequence[int]],
    config: CollectiveConfig,
    learner: Learner,
    run: CollectiveRun,
) -> dict[int, RequestResult]:
    """Draft, vote and verify in turn, every running request in each batch."""
    results: dict[int, RequestResult] = {}
    pending = deque(enumerate(prompts))
    running: list[Request] = []
    try:
        while pending or running:
            joining = []
            while pending and len(running) + len(joining) < config.max_batch:
                key, prompt = pending.popleft()
                joining.append(new_request(target, key, prompt, config.sampling))
            if joining:
                prefill(target, joining, config.sampling, config.max_tokens)
                running += joining
            live = [r for r in running if not r.done]
            if live:
                t0 = time.perf_counter()
                contexts = [(r.key, r.context) for r in live]
                votes = draft_and_vote(target, sources, contexts, learner.s, learner.weights.weights)
                run.draft_s += time.perf_counter() - t0
                learner.verify(target, list(zip(live, votes, strict=True)), run)
            for r in [r for r in running if r.done]:
                results[r.key] = r.result
                target.release(r.seq)
                for src in sources:
                    src.forget(r.key)
            running = [r for r in running if not r.done]
    finally:
        for r in running:
            target.release(r.seq)
    return results
