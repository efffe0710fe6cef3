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
from coinfer.engines.collective.gate import GateConfig, SourceGate
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
    ``gate``: draft only with the sources that pay for themselves (``gate``), or None for
    every source every round (classic speculative decoding);
    ``pipeline``: draft on another thread while the target verifies."""

    max_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_tokens: int | LengthSelectorConfig = field(default_factory=LengthSelectorConfig)
    vote: VoteConfig = field(default_factory=VoteConfig)
    gate: GateConfig | None = field(default_factory=GateConfig)
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
    learner = _learner(sources, config)
    started = time.perf_counter()
    if config.pipeline and sources:
        from coinfer.engines.collective.pipeline import run_pipelined

        results = run_pipelined(target, sources, prompts, config, learner, run)
    else:
        results = _run_sequential(target, sources, prompts, config, learner, run)
    run.results = [results[k] for k in range(len(prompts))]
    run.weights = list(learner.weights.weights)
    if learner.gate is not None:
        run.rounds_on, run.rounds_explored = list(learner.gate.rounds_on), list(learner.gate.rounds_explored)
    if learner.selector is not None:
        run.s_history = list(learner.selector.history)
    run.wall_s = time.perf_counter() - started
    return run


def _learner(sources: Sequence[DraftSource], config: CollectiveConfig) -> Learner:
    n_sources = len(sources)
    weights = VoteWeights(max(1, n_sources), config.vote)
    if isinstance(config.draft_tokens, LengthSelectorConfig):
        selector, fixed = SpeculationLengthSelector(config.draft_tokens), 0
    else:
        selector, fixed = None, config.draft_tokens
    with_model = [getattr(src, "model", None) is not None for src in sources] or [False]
    sizes_own = [bool(getattr(src, "sizes_own_drafts", False)) for src in sources] or [False]
    gate = None if config.gate is None else SourceGate(max(1, n_sources), config.gate, with_model, sizes_own)
    return Learner(weights, selector, fixed, config.sampling, config.max_tokens, gate, sources)


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
                prefill(target, joining, config.sampling, config.max_tokens, learner.gate)
                running += joining
            live = [r for r in running if not r.done]
            if live:
                t0 = time.perf_counter()
                contexts = [(r.key, r.context) for r in live]
                votes = draft_and_vote(
                    target, sources, contexts, learner.s, learner.weights.weights, gate=learner.gate
                )
                draft_s = time.perf_counter() - t0
                run.draft_s += draft_s
                learner.verify(target, list(zip(live, votes, strict=True)), run, draft_s)
            for r in [r for r in running if r.done]:
                results[r.key] = r.result
                target.release(r.seq)
                learner.forget(r.key)
            running = [r for r in running if not r.done]
    finally:
        for r in running:
            target.release(r.seq)
    return results
