"""The collective engine on tiny transformers models (exact arithmetic): lossless output,
the scheduler's pools, and weights that follow the drafts that hold."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from tests.conftest import needs_torch

from coinfer.decoding import SamplingParams, generate
from coinfer.engines.collective.engine import CollectiveConfig, collective_generate
from coinfer.engines.collective.selector import LengthSelectorConfig
from coinfer.engines.collective.sources import ModelSource, NgramSource
from coinfer.errors import ConfigError
from coinfer.models.base import SteerableModel

pytestmark = needs_torch

TEXTS = [
    "def add(a, b): return a + b; def add(a, b):",
    "Count: one two three four five one two three",
    "x = [1, 2, 3]; y = [1, 2, 3]; z = [1,",
]


def _prompts(target: SteerableModel) -> list[list[int]]:
    return [target.chat_prompt([{"role": "user", "content": t}]) for t in TEXTS]


class JunkSource:
    """A draft source that is always wrong."""

    name = "junk"

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[list[int]]:
        return [[3] * k for _ in contexts]

    def forget(self, key: int) -> None:
        return None

    def close(self) -> None:
        return None


@pytest.mark.parametrize("draft_tokens", [0, 3, LengthSelectorConfig(s_start=2, decision_threshold=2)])
def test_greedy_output_is_the_target_alone_whatever_the_batch(
    tiny_pair: tuple[SteerableModel, SteerableModel], draft_tokens: int | LengthSelectorConfig
) -> None:
    target, draft = tiny_pair
    prompts = _prompts(target)
    plain = [generate(target, p, max_tokens=24).tokens for p in prompts]
    sources = [NgramSource(), ModelSource(draft)]
    config = CollectiveConfig(max_tokens=24, draft_tokens=draft_tokens, max_batch=2)
    run = collective_generate(target, sources if draft_tokens else [], prompts, config)
    assert [r.tokens for r in run.results] == plain  # three requests through two running slots
    assert all(r.finish_reason in ("stop", "length") for r in run.results)
    assert run.output_tokens == sum(map(len, plain))
    if draft_tokens:
        assert run.longest_draft and sum(r.drafted for r in run.results) > 0
    for src in sources:
        src.close()


def test_seeded_sampling_gives_each_request_the_target_alones_text(
    tiny_pair: tuple[SteerableModel, SteerableModel],
) -> None:
    target, draft = tiny_pair
    prompts = _prompts(target)[:2]
    sampling = SamplingParams(temperature=0.9, seed=5)
    plain = [
        generate(target, p, max_tokens=20, sampling=SamplingParams(temperature=0.9, seed=5 + i)).tokens
        for i, p in enumerate(prompts)
    ]
    config = CollectiveConfig(max_tokens=20, sampling=sampling, draft_tokens=3)
    run = collective_generate(target, [ModelSource(draft), NgramSource()], prompts, config)
    assert [r.tokens for r in run.results] == plain


def test_the_vote_learns_which_source_holds(tiny_pair: tuple[SteerableModel, SteerableModel]) -> None:
    """A junk source first (it wins the first tie) and the target drafting for itself,
    both drafting every round (no gate)."""
    target, _ = tiny_pair
    prompts = _prompts(target)[:2]
    config = CollectiveConfig(max_tokens=24, draft_tokens=3, gate=None)
    run = collective_generate(target, [JunkSource(), ModelSource(target)], prompts, config)
    assert [r.tokens for r in run.results] == [generate(target, p, max_tokens=24).tokens for p in prompts]
    assert run.weights[1] > 1.0 > run.weights[0]
    assert run.voted_from[0] == 0 and run.voted_from[-1] == 1  # the vote moved to the source that holds
    acceptance = run.acceptance()
    # drafting for itself holds almost always (a random tiny model's near-ties can flip
    # between a one-token step and a verification forward)
    assert acceptance["junk"] == 0.0 and acceptance[target.name] > 0.8
    assert acceptance["voted"] is not None and acceptance["voted"] > 0.5


def test_bad_settings_are_config_errors(tiny_pair: tuple[SteerableModel, SteerableModel]) -> None:
    target, _ = tiny_pair
    with pytest.raises(ConfigError):
        CollectiveConfig(max_batch=0)
    with pytest.raises(ConfigError):
        collective_generate(target, [], _prompts(target), CollectiveConfig(draft_tokens=2))


@pytest.mark.parametrize("n_prompts", [1, 3])
def test_the_pipeline_gives_the_target_alones_text(
    tiny_pair: tuple[SteerableModel, SteerableModel], n_prompts: int
) -> None:
    target, draft = tiny_pair
    prompts = _prompts(target)[:n_prompts]
    plain = [generate(target, p, max_tokens=24).tokens for p in prompts]
    config = CollectiveConfig(max_tokens=24, draft_tokens=3, max_batch=2, pipeline=True, gate=None)
    run = collective_generate(target, [ModelSource(draft), NgramSource()], prompts, config)
    assert [r.tokens for r in run.results] == plain
    assert run.verifications > 0 and run.predrafts_used + run.predrafts_wasted > 0


def test_the_pipeline_refuses_the_target_as_its_own_draft(
    tiny_pair: tuple[SteerableModel, SteerableModel],
) -> None:
    target, _ = tiny_pair
    config = CollectiveConfig(max_tokens=4, draft_tokens=2, pipeline=True)
    with pytest.raises(ConfigError, match="cannot be the target"):
        collective_generate(target, [ModelSource(target)], _prompts(target)[:1], config)


@pytest.mark.parametrize("pipeline", [False, True])
def test_requests_that_end_at_their_first_token_finish_at_once(
    tiny_pair: tuple[SteerableModel, SteerableModel], pipeline: bool
) -> None:
    target, draft = tiny_pair
    prompts = _prompts(target)
    config = CollectiveConfig(max_tokens=1, draft_tokens=2, pipeline=pipeline)
    run = collective_generate(target, [ModelSource(draft)], prompts, config)
    assert [len(r.tokens) for r in run.results] == [
        len(generate(target, p, max_tokens=1).tokens) for p in prompts
    ]
    assert all(r.finish_reason in ("stop", "length") for r in run.results) and run.verifications == 0


def test_the_gate_stops_a_source_whose_drafts_never_hold(
    tiny_pair: tuple[SteerableModel, SteerableModel],
) -> None:
    """A junk source is measured on one request, then never drafts for all of them; the
    text is still the target's."""
    target, _ = tiny_pair
    prompts = _prompts(target)
    config = CollectiveConfig(max_tokens=24, draft_tokens=3, max_batch=3)
    run = collective_generate(target, [JunkSource()], prompts, config)
    assert [r.tokens for r in run.results] == [generate(target, p, max_tokens=24).tokens for p in prompts]
    assert run.rounds_on == [0] and 0 < run.rounds_explored[0] < run.verifications
    assert sum(r.drafted for r in run.results) < 3 * run.verifications  # never a draft for every request


class ThreadCounter:
    """Records the thread counts a pipeline gives a model."""

    def __init__(self) -> None:
        self.counts: list[int] = []

    def set_threads(self, n: int) -> int:
        self.counts.append(n)
        return 2


def test_the_target_keeps_every_core_while_no_draft_model_drafts() -> None:
    from coinfer.engines.collective.pipeline import _Cores

    target = ThreadCounter()
    cores = _Cores(target, [0, 1], draft_threads=1)  # type: ignore[arg-type]
    cores.fit(drafts_compute=False)
    cores.fit(drafts_compute=True)
    cores.fit(drafts_compute=True)
    cores.fit(drafts_compute=False)
    assert target.counts == [1, 2]  # the drafter's core only while a draft model drafts
