"""The collective engine on tiny transformers models (exact arithmetic): lossless output,
the scheduler's pools, and weights that follow the drafts that hold."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from tests.conftest import needs_torch, plain

from coinfer.decoding import ModelDrafter, NgramDrafter, Response, SamplingParams
from coinfer.decoding.draft_length import AdaptiveDraftLength, CostCurve, DraftSizer
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.decoding.split import SplitJudge, split_forward, split_judge
from coinfer.engines.collective import CollectiveConfig, LengthSelectorConfig, generate, stream
from coinfer.engines.collective.pipeline import CoreSplit
from coinfer.engines.collective.rounds import Learner
from coinfer.engines.collective.voting import VoteWeights
from coinfer.errors import ConfigError
from coinfer.models.base import SteerableModel
from coinfer.testing import FixedDrafter, ScriptedModel
from coinfer.testing.models import EOS

TEXTS = [
    "def add(a, b): return a + b; def add(a, b):",
    "Count: one two three four five one two three",
    "x = [1, 2, 3]; y = [1, 2, 3]; z = [1,",
]


def _prompts(target: SteerableModel) -> list[list[int]]:
    return [target.chat_prompt([{"role": "user", "content": t}]) for t in TEXTS]


def junk() -> FixedDrafter:
    """A drafter that is always wrong. It calls no model, so tests that want its drafts
    verified whole pass ``cut_cheap_drafts=False``."""
    return FixedDrafter([3] * 64, name="junk")


def _alone(target: SteerableModel, prompts: list[list[int]], n: int) -> list[list[int]]:
    return [plain(target, p, n).tokens for p in prompts]


def _drafted(responses: list[Response]) -> int:
    return sum(r.stats.drafted for r in responses)


@needs_torch
def test_greedy_rounds_read_back_the_targets_choices_not_its_logits(
    tiny_pair: tuple[SteerableModel, SteerableModel], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A greedy batch's prefill and verifications get one id per row off the target (on a
    GPU, a vocabulary of logits is 600 KB a row), and the text is still the target's own."""
    target, draft = tiny_pair
    prompts = _prompts(target)
    logits_read: list[int] = []
    extend_many = target.extend_many

    def counting(items, **kwargs):  # type: ignore[no-untyped-def]
        logits_read.append(len(items))
        return extend_many(items, **kwargs)

    monkeypatch.setattr(target, "extend_many", counting)
    config = CollectiveConfig(max_tokens=24, draft_tokens=3, max_batch=2, gate=None)
    drafter = ModelDrafter(draft)
    out = generate(target, prompts, drafts=[drafter], config=config)
    drafter.close()
    assert logits_read == [] and _drafted(out) > 0
    assert [r.tokens for r in out] == _alone(target, prompts, 24)
    sampled = CollectiveConfig(max_tokens=8, max_batch=2, sampling=SamplingParams(temperature=0.8, seed=1))
    generate(target, prompts, drafts=[NgramDrafter()], config=sampled)
    assert logits_read  # sampling reads the logits


@needs_torch
@pytest.mark.parametrize(("draft_tokens", "selector"), [(0, None), (3, None), ("auto", (2, 2))])
def test_greedy_output_is_the_target_alone_whatever_the_batch(
    tiny_pair: tuple[SteerableModel, SteerableModel],
    draft_tokens: int | str,
    selector: tuple[int, int] | None,
) -> None:
    target, draft = tiny_pair
    prompts = _prompts(target)
    drafts = [NgramDrafter(), ModelDrafter(draft)]
    config = CollectiveConfig(
        max_tokens=24,
        draft_tokens=draft_tokens,  # type: ignore[arg-type]
        selector=LengthSelectorConfig(s_start=selector[0], decision_threshold=selector[1])
        if selector
        else LengthSelectorConfig(),
        max_batch=2,
        gate=None,  # the model drafts every round, whatever the machine's timings say of it
    )
    out = generate(target, prompts, drafts=drafts if draft_tokens else [], config=config)
    assert [r.tokens for r in out] == _alone(target, prompts, 24)  # three requests through two running slots
    assert [r.request for r in out] == [0, 1, 2]
    assert all(r.finish_reason in ("stop", "length") for r in out)
    assert all(r.text == target.detokenize(r.tokens) and r.stats.n_tokens == len(r.tokens) for r in out)
    if draft_tokens:
        assert out[0].extras["longest_draft"] and _drafted(out) > 0
    for d in drafts:
        d.close()
    assert draft.live_sequences == 0


@needs_torch
def test_the_stream_advances_every_request_and_ends_each_once(
    tiny_pair: tuple[SteerableModel, SteerableModel],
) -> None:
    target, _ = tiny_pair
    prompts = _prompts(target)
    responses = list(
        stream(target, prompts, drafts=[NgramDrafter()], config=CollectiveConfig(max_tokens=16, max_batch=2))
    )
    for i, alone in enumerate(_alone(target, prompts, 16)):
        mine = [r for r in responses if r.request == i]
        assert [t for r in mine for t in r.tokens] == alone
        assert [r.finish_reason is not None for r in mine] == [False] * (len(mine) - 1) + [True]
        assert "acceptance_by_draft" in mine[-1].extras and "".join(
            r.text for r in mine
        ) == target.detokenize(alone)


@needs_torch
def test_seeded_sampling_gives_each_request_the_target_alones_text(
    tiny_pair: tuple[SteerableModel, SteerableModel],
) -> None:
    target, draft = tiny_pair
    prompts = _prompts(target)[:2]
    sampling = SamplingParams(temperature=0.9, seed=5)
    alone = [
        plain(target, p, 20, SamplingParams(temperature=0.9, seed=5 + i)).tokens
        for i, p in enumerate(prompts)
    ]
    config = CollectiveConfig(max_tokens=20, sampling=sampling, draft_tokens=3)
    out = generate(target, prompts, drafts=[ModelDrafter(draft), NgramDrafter()], config=config)
    assert [r.tokens for r in out] == alone


@needs_torch
def test_the_vote_learns_which_drafter_holds(tiny_pair: tuple[SteerableModel, SteerableModel]) -> None:
    """A junk drafter first (it wins the first tie) and the target drafting for itself,
    both drafting every round (no gate)."""
    target, _ = tiny_pair
    prompts = _prompts(target)[:2]
    config = CollectiveConfig(max_tokens=24, draft_tokens=3, gate=None, cut_cheap_drafts=False)
    out = generate(target, prompts, drafts=[junk(), ModelDrafter(target)], config=config)
    assert [r.tokens for r in out] == _alone(target, prompts, 24)
    record = out[0].extras
    assert record["weights"][target.name] > 1.0 > record["weights"]["junk"]
    assert record["voted_from"][0] == 0 and record["voted_from"][-1] == 1  # the vote moved to what holds
    acceptance = record["acceptance_by_draft"]
    # drafting for itself holds almost always (a random tiny model's near-ties can flip
    # between a one-token step and a verification forward)
    assert acceptance["junk"] == 0.0 and acceptance[target.name] > 0.8
    assert acceptance["voted"] is not None and acceptance["voted"] > 0.5


def test_the_drafters_hear_what_the_target_kept_and_forget_finished_requests() -> None:
    """A scripted target writes 'abcdef…'; a drafter proposes 'bX' after every context."""
    target = ScriptedModel(lambda prefix: ord("a") + (len(prefix) - 1) % 26, n_ctx=64)
    drafter = FixedDrafter([ord("b"), ord("X")])
    config = CollectiveConfig(max_tokens=6, draft_tokens=2, gate=None, cut_cheap_drafts=False)
    out = generate(target, [[1], [2, 2]], drafts=[drafter], config=config)
    assert [bytes(r.tokens) for r in out] == [b"abcdef", b"bcdefg"]
    for _, context, kept in drafter.feedbacks:
        expected = [ord("b"), ord("c")] if context[-1] == ord("a") else [target.next_token(context)]
        assert kept == expected  # "b" held after "a" (then "X" did not); elsewhere "b" fails at once
    assert sorted(drafter.forgotten) == [0, 1]


@pytest.mark.parametrize("pipeline", [False, True])
def test_a_running_request_counts_the_time_a_joining_prompt_stalls_it(pipeline: bool) -> None:
    """Two slots: 's' ends after two tokens, so 'more' joins while 'long' runs; 'long'
    waits through that prefill, and no request counts a prefill before its first token."""
    target = ScriptedModel(lambda prefix: EOS if prefix[0] == ord("s") and len(prefix) >= 3 else ord("x"))
    prompts = [list(b"long"), list(b"s"), list(b"more")]
    config = CollectiveConfig(max_tokens=8, draft_tokens=0, max_batch=2, pipeline=pipeline)
    long, short, late = generate(target, prompts, config=config)
    assert len(long.tokens) == 8 and short.finish_reason == "stop"
    assert long.stats.stalled_s > 0
    assert short.stats.stalled_s == 0 and late.stats.stalled_s == 0


@needs_torch
def test_bad_settings_are_config_errors(tiny_pair: tuple[SteerableModel, SteerableModel]) -> None:
    target, _ = tiny_pair
    with pytest.raises(ConfigError):
        CollectiveConfig(max_batch=0)
    with pytest.raises(ConfigError, match="draft_tokens"):
        CollectiveConfig(draft_tokens=-1)
    with pytest.raises(ConfigError, match="batch_floor"):
        CollectiveConfig(batch_floor=1.5)
    with pytest.raises(ConfigError, match="at least one drafter"):
        generate(target, _prompts(target), config=CollectiveConfig(draft_tokens=2))


@needs_torch
@pytest.mark.parametrize("n_prompts", [1, 3])
def test_the_pipeline_gives_the_target_alones_text(
    tiny_pair: tuple[SteerableModel, SteerableModel], n_prompts: int
) -> None:
    target, draft = tiny_pair
    prompts = _prompts(target)[:n_prompts]
    config = CollectiveConfig(max_tokens=24, draft_tokens=3, max_batch=2, pipeline=True, gate=None)
    out = generate(target, prompts, drafts=[ModelDrafter(draft), NgramDrafter()], config=config)
    assert [r.tokens for r in out] == _alone(target, prompts, 24)
    record = out[0].extras
    assert 0 < record["pipelined_rounds"] <= record["verifications"]  # the pipeline's first window at least
    if n_prompts == 1:  # nothing else to draft while the target verifies: it drafts ahead
        assert record["predrafts_used"] + record["predrafts_wasted"] > 0


@needs_torch
def test_the_pipeline_refuses_the_target_as_its_own_draft(
    tiny_pair: tuple[SteerableModel, SteerableModel],
) -> None:
    target, _ = tiny_pair
    config = CollectiveConfig(max_tokens=4, draft_tokens=2, pipeline=True)
    with pytest.raises(ConfigError, match="cannot be the target"):
        generate(target, _prompts(target)[:1], drafts=[ModelDrafter(target)], config=config)


@needs_torch
@pytest.mark.parametrize("pipeline", [False, True])
def test_requests_that_end_at_their_first_token_finish_at_once(
    tiny_pair: tuple[SteerableModel, SteerableModel], pipeline: bool
) -> None:
    target, draft = tiny_pair
    prompts = _prompts(target)
    config = CollectiveConfig(max_tokens=1, draft_tokens=2, pipeline=pipeline)
    out = generate(target, prompts, drafts=[ModelDrafter(draft)], config=config)
    assert [len(r.tokens) for r in out] == [len(t) for t in _alone(target, prompts, 1)]
    assert all(r.finish_reason in ("stop", "length") for r in out) and out[0].extras["verifications"] == 0


@needs_torch
def test_the_gate_stops_a_drafter_whose_drafts_never_hold(
    tiny_pair: tuple[SteerableModel, SteerableModel],
) -> None:
    """A junk drafter is measured on one request, then never drafts for all of them; the
    text is still the target's."""
    target, _ = tiny_pair
    prompts = _prompts(target)
    config = CollectiveConfig(max_tokens=24, draft_tokens=3, max_batch=3, cut_cheap_drafts=False)
    out = generate(target, prompts, drafts=[junk()], config=config)
    assert [r.tokens for r in out] == _alone(target, prompts, 24)
    record = out[0].extras
    assert record["rounds_drafting"] == {"junk": 0}
    assert 0 < record["rounds_exploring"]["junk"] < record["verifications"]
    assert _drafted(out) < 3 * record["verifications"]  # never a draft for every request


def test_each_model_has_every_core_unless_pipelined() -> None:
    target, draft = ScriptedModel(lambda prefix: 0), ScriptedModel(lambda prefix: 0)
    cores = CoreSplit(target, [draft], [0, 1], draft_threads=1)
    cores.fit(pipelined=False)
    cores.fit(pipelined=True)
    cores.fit(pipelined=True)
    cores.fit(pipelined=False)
    assert target.threads == [2, 1, 2]  # the drafter's core only while pipelined
    assert draft.threads == [2, 1, 2]  # drafting on the critical path gets every core


def test_with_only_cheap_drafts_the_pipeline_starts_no_drafter_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--pipeline`` with n-gram lookup alone: nothing to overlap, so sequential rounds,
    no thread, and the record says the pipeline ran for no round."""
    import coinfer.engines.collective.pipeline as pipeline

    started: list[str] = []

    class Thread(pipeline.threading.Thread):
        def start(self) -> None:
            started.append(self.name)
            super().start()

    monkeypatch.setattr(pipeline.threading, "Thread", Thread)
    target = ScriptedModel(lambda prefix: (len(prefix) * 7) % 5 + 3)
    config = CollectiveConfig(max_tokens=16, max_batch=2, pipeline=True)
    prompts = [[3, 4, 5, 6], [4, 5, 6, 7], [5, 6, 7, 3]]
    out = generate(target, prompts, drafts=[NgramDrafter()], config=config)
    sequential = CollectiveConfig(max_tokens=16, max_batch=2)
    alone = generate(target, prompts, drafts=[NgramDrafter()], config=sequential)
    assert [r.tokens for r in out] == [r.tokens for r in alone] and all(len(r.tokens) == 16 for r in out)
    assert started == [] and out[0].extras["pipelined_rounds"] == 0
    assert alone[0].extras["pipelined_rounds"] is None  # not allowed, not run


def test_a_pipeline_that_steps_aside_prices_and_splits_as_the_sequential_engine() -> None:
    """With n-gram lookup alone the pipeline runs sequential rounds only. They verify on
    every core, so they price forwards by the target's shared curve and split them by the
    sequential judge, starting from what runs before them learned; the pipelined phases'
    judge sees nothing (run M at batch 8: a curve of its own, started empty in every run)."""
    target = ScriptedModel(lambda prefix: (len(prefix) * 7) % 5 + 3)
    prompts = [[3, 4, 5, 6], [4, 5, 6, 7], [5, 6, 7, 3]]
    learned = Learned()  # one session's
    config = CollectiveConfig(max_tokens=16, max_batch=2)
    generate(target, prompts, drafts=[NgramDrafter()], config=config, learned=learned)
    curve, judge = target_costs(target, learned), split_judge(target, pipeline=False, learned=learned)
    measured, verified = curve.forwards, judge.verified
    assert measured > 0 and verified > 0
    config = CollectiveConfig(max_tokens=16, max_batch=2, pipeline=True)
    out = generate(target, prompts, drafts=[NgramDrafter()], config=config, learned=learned)
    assert out[0].extras["pipelined_rounds"] == 0
    assert curve.forwards > measured and judge.verified > verified
    assert split_judge(target, pipeline=True, learned=learned).verified == 0


def test_a_learner_moved_to_another_curve_prices_its_sizers_drafts_by_it() -> None:
    sizer = DraftSizer(AdaptiveDraftLength(costs=CostCurve({1: 0.04})))
    learner = Learner(VoteWeights(1), None, 4, SamplingParams(), 16, None, [NgramDrafter()], [sizer])
    other, judge = CostCurve({1: 0.02, 8: 0.05}), SplitJudge()
    learner.use_costs(other, judge)
    assert learner.costs is other and learner.judge is judge
    assert isinstance(sizer.policy, AdaptiveDraftLength) and sizer.policy.costs is other


def test_a_batch_of_copies_verifies_the_ngram_drafts_past_s() -> None:
    """In a batch the n-gram source's drafts are cut together, to what the forward's cost
    repays, not stopped at ``s``: where the text repeats the prompt, they run long."""

    def cycle(prefix: list[int]) -> int:  # the alphabet over and over, by position
        return ord("a") + (len(prefix) - 1) % 26

    target = ScriptedModel(cycle, n_ctx=256)
    # a forward costs what one on a CPU does, a fixed part and a part per token, so what the
    # sizer measures does not hang on how busy the machine running the test is
    _timed(target, lambda n: 0.002 + 0.0002 * n)
    prompts = [[ord("z")] + [cycle([0] * i) for i in range(1, n)] for n in (60, 47)]
    config = CollectiveConfig(max_tokens=120, draft_tokens=4, max_batch=2)
    out = generate(target, prompts, drafts=[NgramDrafter()], config=config)
    assert [r.tokens for r in out] == _alone(target, prompts, 120)
    assert max(out[0].extras["longest_draft"]) > 4
    assert sum(r.stats.accepted for r in out) > 120


def test_split_forward_cuts_only_where_the_measured_curve_says_two_cost_less() -> None:
    tiled = {1: 32.0, 4: 104.0, 8: 225.0, 16: 276.0}  # ms on this CPU: 8 rows dearer than two 4s
    assert split_forward([1] * 8, tiled) == 4
    assert split_forward([1] * 16, tiled) == 0  # 276 against 450
    assert split_forward([2] + [1] * 8, {**tiled, 5: 118.0, 10: 250.0}) == 4  # 5 + 5 rows
    assert split_forward([1] * 8, {4: 104.0, 9: 239.0}) == 0  # 8 itself never measured: run it whole
    assert split_forward([1] * 8, {4: 104.0, 8: 210.0}) == 0  # under the margin
    assert split_forward([8], tiled) == 0  # one request: nothing to cut


def test_one_slow_forward_over_a_whole_batch_does_not_split_the_next_rounds() -> None:
    """Costs measured on this CPU (s): a forward over 4 tokens 0.131, over 1 0.044, over 3
    0.123. One forward over 4 slowed to 0.40 s raises that point's moving average above
    the halves' sum; decided on the floors, the batch stays whole."""
    curve = CostCurve()
    for n, seconds in ((1, 0.044), (3, 0.123), (4, 0.131), (4, 0.40)):
        curve.record(n, seconds, smoothing=0.3, refresh=64)
    assert split_forward([1] * 4, curve) != 0  # the moving average: 1 + 3 looks cheaper
    assert split_forward([1] * 4, curve.floors()) == 0


def _timed(target: ScriptedModel, seconds: dict[int, float] | Callable[[int], float]) -> list[int]:
    """Make each batched forward of ``target`` take ``seconds`` of its tokens (a table, 1 ms
    where it has none, or a function); the rows of every forward, as they run (the
    backend's hook, which logits, last rows and choices all go through)."""
    calls: list[int] = []
    extend_many = target._extend_many
    cost = seconds if callable(seconds) else (lambda n: seconds.get(n, 0.001))

    def timed(items, last_only):  # type: ignore[no-untyped-def]
        calls.append(len(items))
        time.sleep(cost(sum(len(ids) for _, ids in items)))
        return extend_many(items, last_only)

    target._extend_many = timed  # type: ignore[method-assign]
    return calls


def _cycle(prefix: list[int]) -> int:
    return ord("a") + (len(prefix) * 7) % 26


def test_a_batch_of_eight_is_split_where_it_pays_with_no_curve_to_propose_it() -> None:
    """Nothing measured beforehand (run F, batch 8: the curve proposed the cut seldom and
    batches of 8 ran whole at 290 ms against two forwards of 4 at 206): the even cut is
    probed, judged in pairs and kept; the session's next run on the target starts split,
    and another session's measures afresh."""
    target = ScriptedModel(_cycle, n_ctx=64)
    calls = _timed(target, {1: 0.001, 4: 0.004, 8: 0.020})
    prompts = [[ord("a") + i, ord("b")] for i in range(8)]
    config = CollectiveConfig(max_tokens=40, draft_tokens=0, max_batch=8)
    learned = Learned()  # one session's
    out = generate(target, prompts, config=config, learned=learned)
    assert [r.tokens for r in out] == _alone(target, prompts, 40)
    # the prefill, and whole until three probes (one every fourth forward) are paired
    assert calls.count(8) <= 11 and calls.count(4) >= 2 * 28
    calls.clear()
    generate(target, prompts, config=config, learned=learned)
    assert calls.count(8) <= 3  # the prefill, and a whole now and then
    calls.clear()
    generate(target, prompts, config=config, learned=Learned())
    assert calls.count(8) > 3  # a session that learned nothing probes again


def test_a_batch_of_eight_whose_halves_cost_more_stays_whole_after_its_probes() -> None:
    """As on a GPU, where a forward's cost hardly grows with its rows."""
    target = ScriptedModel(_cycle, n_ctx=64)
    calls = _timed(target, {4: 0.010, 8: 0.011})
    prompts = [[ord("a") + i, ord("b")] for i in range(8)]
    generate(target, prompts, config=CollectiveConfig(max_tokens=40, draft_tokens=0, max_batch=8))
    assert calls.count(4) <= 2 * 4  # three pairs' splits, and at most one probe again
    assert calls.count(8) >= 40 - 8


def test_a_split_batch_of_eight_still_verifies_its_copies_drafts() -> None:
    """Forwards of 8 to 15 tokens dearer than two of 4 (llama.cpp's kernel on this CPU),
    longer ones cheap per token. A first run without drafts learns to split the batch of
    8; in the next, the n-gram drafts of its copies are still verified (run G: with each
    half recorded as a point of the curve, the batch's own point went stale and the
    sizers drafted nothing)."""

    def cycle(prefix: list[int]) -> int:  # the alphabet over and over, by position
        return ord("a") + (len(prefix) - 1) % 26

    target = ScriptedModel(cycle, n_ctx=256)
    calls = _timed(target, lambda n: 0.020 if 8 <= n < 16 else 0.002 + 0.0005 * n)
    prompts = [[ord("z")] + [cycle([0] * i) for i in range(1, 40 + i)] for i in range(8)]
    learned = Learned()  # one session's
    config = CollectiveConfig(max_tokens=40, draft_tokens=0, max_batch=8)
    generate(target, prompts, config=config, learned=learned)
    assert calls.count(4) >= 2 * 28  # split
    calls.clear()
    out = generate(
        target, prompts, drafts=[NgramDrafter()], config=CollectiveConfig(max_tokens=80, max_batch=8),
        learned=learned,
    )  # fmt: skip
    assert [r.tokens for r in out] == _alone(target, prompts, 80)
    assert sum(r.stats.accepted for r in out) > 8 * 40  # most tokens came from drafts
    assert len(calls) < 80  # far fewer forwards than tokens a request


def test_split_forward_explores_a_cut_whose_halves_are_not_measured() -> None:
    assert split_forward([1] * 8, {8: 225.0}) == 0
    assert split_forward([1] * 8, {8: 225.0}, explore=True) == 4
    assert split_forward([1] * 8, {1: 32.0, 8: 225.0}, explore=True) == 0  # measured around: no gain
    assert split_forward([3, 1], {4: 104.0}, explore=True) == 1
