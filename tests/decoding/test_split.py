"""The split judge: a verification runs as two forwards only where paired measurements of
forwards over its tokens, split and whole a few verifications apart, say two cost less."""

from __future__ import annotations

from statistics import median

from coinfer.decoding.learned import Learned
from coinfer.decoding.split import (
    PAIR_GAP,
    PAIRS,
    PROBE_AFTER,
    SPLIT_PROBE,
    SplitJudge,
    even_cut,
    probe_cut,
    split_judge,
)

SHAPE = 4  # four requests, one token each


def _run(judge: SplitJudge, proposed: bool, whole_s: float, split_s: float) -> bool:
    """One verification: the judge's choice, and what it cost."""
    split = judge.choose(SHAPE, proposed)
    judge.measured(SHAPE, split, split_s if split else whole_s)
    return split


def test_a_proposed_split_is_probed_in_pairs_and_dropped_where_it_costs_more() -> None:
    """2 + 2 cost 21% more than one forward over 4 (batch 4 on this CPU): every fourth
    proposal is split, paired with the whole just before it, and after three pairs the
    size runs whole until it is probed again, ``SPLIT_PROBE`` proposals on."""
    judge = SplitJudge()
    choices = [_run(judge, True, 0.183, 0.22) for _ in range(3 * PROBE_AFTER + SPLIT_PROBE)]
    assert choices[: 3 * PROBE_AFTER] == ([False] * (PROBE_AFTER - 1) + [True]) * 3
    assert not judge.pays(SHAPE) and sum(choices) == 4 and choices[-1]


def test_a_split_that_pays_is_kept_and_its_whole_measured_now_and_then() -> None:
    """Eight rows in one forward 225 ms, in two of four 208 (llama.cpp's tiled kernel here)."""
    judge = SplitJudge()
    choices = []
    for _ in range(3 * SPLIT_PROBE):
        split = judge.choose(8, True)
        judge.measured(8, split, 0.208 if split else 0.225)
        choices.append(split)
    assert judge.pays(8)
    assert choices.count(False) <= 3 * (PROBE_AFTER - 1) + 3  # the probes' whole forwards only


def test_a_fast_minute_for_the_halves_does_not_lock_the_batch_into_splitting() -> None:
    """The halves measured while the machine was fast, the whole while it was slow, look
    cheaper point against point; the pairs are measured in one minute each."""
    judge = SplitJudge()
    for _ in range(PROBE_AFTER - 2):
        _run(judge, True, 0.183, 0.22)
    _run(judge, True, 0.40, 0.44)  # the whole just before the first probe, in a slow minute
    choices = [_run(judge, True, 0.183, 0.22) for _ in range(3 * SPLIT_PROBE)]
    # the first split pairs with that slow whole (0.55); the next two pairs, each in one
    # minute, say 1.2, and the median of the three rules; while the 0.55 is among its
    # latest pairs the size is probed every few proposals, then only every SPLIT_PROBE
    assert choices[0] and not judge.pays(SHAPE) and sum(choices[: 2 * SPLIT_PROBE]) <= PAIRS + 1
    assert sum(choices[-SPLIT_PROBE:]) <= 1


def test_a_split_is_paired_only_with_a_whole_forward_close_beside_it() -> None:
    judge = SplitJudge()
    for _ in range(PROBE_AFTER - 1):
        assert not _run(judge, True, 0.183, 0.22)
    for _ in range(PAIR_GAP + 1):  # other sizes in between
        judge.choose(3, False)
        judge.measured(3, False, 0.15)
    assert _run(judge, True, 0.183, 0.22)  # unpaired: the wholes are too old
    assert not _run(judge, True, 0.183, 0.22)  # so the next runs whole, beside it
    assert not judge.pays(SHAPE)


def test_shapes_are_judged_apart() -> None:
    judge = SplitJudge()
    for _ in range(4 * PROBE_AFTER):
        for shape, whole, split in ((4, 0.183, 0.22), (8, 0.225, 0.208)):
            s = judge.choose(shape, True)
            judge.measured(shape, s, split if s else whole)
    assert judge.pays(8) and not judge.pays(4)


def test_the_even_cut_of_a_forward_of_eight_tokens_or_more_is_probed_unless_the_curve_rules_it_out() -> None:
    """The curve proposed batch 8's cut too seldom to be judged within a run; the even cut
    is offered to the judge whenever the curve does not measure two forwards clearly
    dearer than one."""
    assert even_cut([1] * 8) == 4 and even_cut([5, 1, 1, 1]) == 1 and even_cut([3]) == 0
    assert probe_cut([1] * 8, {}) == 4  # nothing measured: probe
    assert probe_cut([1] * 8, {4: 0.104, 8: 0.290}) == 4  # the curve says two pay: probe too
    assert probe_cut([1] * 8, {4: 0.104, 8: 0.130}) == 0  # 0.208 against 0.130: no probe
    assert probe_cut([1] * 4, {}) == 0  # under 8 tokens: only where the curve proposes
    assert probe_cut([7, 1], {}) == 0  # no cut leaves a third on each side
    assert probe_cut([3, 3, 2, 1, 1], {}) == 2  # 6 + 4 tokens


def test_what_a_judge_learned_stays_with_the_target_in_its_session() -> None:
    class Target:  # a model object, weakly referenced
        pass

    a, b = Target(), Target()
    learned, other = Learned(), Learned()
    judge = split_judge(a, pipeline=False, learned=learned)
    assert split_judge(a, pipeline=False, learned=learned) is judge
    assert split_judge(a, pipeline=True, learned=learned) is not judge
    assert split_judge(b, pipeline=False, learned=learned) is not judge
    assert split_judge(a, pipeline=False, learned=other) is not judge


def test_a_paying_size_keeps_paying_through_odd_pairs_and_stops_when_splits_cost_more() -> None:
    """Eight rows split pay (0.92 of the whole); two pairs measured while something else
    ran say 1.1. Three pairs' median turned on two such pairs (run Q's gated-off row ran 68
    forwards of 8 rows whole, plain decoding 4, ``docs/bench/collective``); the verdict
    now moves only when the median of its latest ``PAIRS`` leaves the band between saving
    the margin and saving nothing, so it holds, and a real change still turns it."""
    judge = SplitJudge()
    for _ in range(3 * PROBE_AFTER):  # three pairs
        split = judge.choose(8, True)
        judge.measured(8, split, 0.207 if split else 0.225)
    assert judge.pays(8)
    for _ in range(2):  # two odd pairs
        judge.measured(8, False, 0.225)
        judge.measured(8, True, 0.2475)
    assert judge.pays(8) and judge.pairs()["8"] == [0.92, 0.92, 0.92, 1.1, 1.1]
    for _ in range(2):  # two pairs at 0.98: the median (0.98) is in the band, the verdict holds
        judge.measured(8, False, 0.225)
        judge.measured(8, True, 0.2205)
    assert 0.97 <= median(judge.pairs()["8"]) < 1.0 and judge.pays(8)
    proposals = 0
    while judge.pays(8) and proposals < 4 * SPLIT_PROBE:  # splits now cost 1.1 of the whole, for good
        split = judge.choose(8, True)
        judge.measured(8, split, 0.2475 if split else 0.225)
        proposals += 1
    assert proposals <= 3 * SPLIT_PROBE  # three probes' pairs turn the median of the nine
    assert median(judge.pairs()["8"]) >= 1.0


def test_a_size_whose_pairs_save_less_than_the_margin_is_not_split() -> None:
    """The band from below: pairs at 0.98 of the whole (a split within noise of the whole)
    never start a size splitting."""
    judge = SplitJudge()
    for _ in range(PAIRS + 2):
        judge.measured(8, False, 0.225)
        judge.measured(8, True, 0.2205)
    assert judge.pairs()["8"] == [0.98] * PAIRS and not judge.pays(8)


def test_the_pairs_a_verdict_stands_on_are_recorded_per_size() -> None:
    """What the bench keeps of a run's splits: per size, its latest pairs' split over whole
    seconds, so a size run whole can be told from one never probed."""
    judge = SplitJudge()
    assert judge.pairs() == {}
    for _ in range(3 * PROBE_AFTER):
        _run(judge, True, 0.2, 0.22)
    judge.choose(2, proposed=False)  # a size never proposed for a cut: run whole, no pairs
    judge.measured(2, split=False, seconds=0.1)
    assert judge.pairs() == {str(SHAPE): [1.1, 1.1, 1.1]} and not judge.pays(SHAPE)
