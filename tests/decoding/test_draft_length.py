"""Choosing k: the adaptive policy against scripted cost curves and acceptance rates."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

from coinfer.decoding.draft_length import (
    AdaptiveDraftLength,
    CopyBucket,
    CostCurve,
    DraftSizer,
    FixedDraftLength,
    batch_lengths,
)
from coinfer.decoding.drafters import Draft
from coinfer.errors import ConfigError
from coinfer.models.llamacpp_split import split_passes

# Measured shape on this CPU for qwen2.5-coder-1.5b (ms of one forward over n tokens, n = k + 1)
CPU_CURVE = {1: 85, 2: 128, 3: 140, 4: 144, 5: 150, 6: 200, 7: 240, 8: 263, 9: 300, 17: 323, 33: 552, 49: 719}


def _cost(curve: dict[int, float], n: int) -> float:
    sizes = sorted(curve)
    lo = max(s for s in sizes if s <= n)
    hi = min((s for s in sizes if s >= n), default=lo)
    return curve[lo] if hi == lo else curve[lo] + (curve[hi] - curve[lo]) * (n - lo) / (hi - lo)


def _round(  # type: ignore[no-untyped-def]
    policy, rng, acceptance: float, curve: dict[int, float], bucket: int = 0, draft_ms_per_token: float = 0.0
) -> tuple[int, float]:
    """One round with a geometric drafter: (tokens produced, ms spent)."""
    asked = policy.next_k()
    k = policy.trim(asked, bucket)
    matched = 0  # how far the whole proposal agrees with what the target goes on to produce
    while matched < asked and rng.random() < acceptance:
        matched += 1
    verify, draft = _cost(curve, k + 1), draft_ms_per_token * asked
    policy.observe(drafted=k, draft_s=draft, verify_s=verify, proposed=asked)
    for position in range(1, min(matched + 1, asked) + 1):
        policy.learn(bucket=bucket, position=position, kept=position <= matched)
    return min(matched, k) + 1, verify + draft


def _simulate(policy, curve: dict[int, float], acceptance: float, rounds: int = 400, seed: int = 0) -> float:  # type: ignore[no-untyped-def]
    """Tokens per ms achieved by ``policy`` with a geometric drafter of the given acceptance."""
    rng = np.random.default_rng(seed)
    tokens = time = 0.0
    for _ in range(rounds):
        n, ms = _round(policy, rng, acceptance, curve)
        tokens += n
        time += ms
    return tokens / time


def _best_fixed(curve: dict[int, float], acceptance: float, k_max: int = 48) -> tuple[int, float]:
    rates = {k: sum(acceptance**i for i in range(k + 1)) / _cost(curve, k + 1) for k in range(k_max + 1)}
    best = max(rates, key=rates.__getitem__)
    return best, rates[best]


@pytest.mark.parametrize("acceptance", [0.0, 0.3, 0.6, 0.8, 0.95])
def test_adaptive_is_close_to_the_best_fixed_k_and_never_slower_than_plain(acceptance: float) -> None:
    policy = AdaptiveDraftLength()
    achieved = _simulate(policy, CPU_CURVE, acceptance)
    _, best = _best_fixed(CPU_CURVE, acceptance)
    plain = 1 / CPU_CURVE[1]
    assert achieved >= 0.95 * plain
    assert achieved >= 0.85 * best


def test_with_useless_drafts_it_stops_drafting() -> None:
    policy = AdaptiveDraftLength()
    _simulate(policy, CPU_CURVE, acceptance=0.0, rounds=100)
    assert policy.best_k() == 0
    assert policy.acceptance() < 0.5  # below the prior, after only the few rounds it took to give up


@pytest.mark.parametrize(("acceptance", "best_region"), [(0.8, range(3, 6)), (0.97, range(15, 33))])
def test_with_good_drafts_it_finds_the_cheap_sizes_of_a_steep_curve(
    acceptance: float, best_region: range
) -> None:
    """The cheap end (n = 5) for fair drafts, past the plateau (n >= 17) for near-perfect ones."""
    policy = AdaptiveDraftLength()
    achieved = _simulate(policy, CPU_CURVE, acceptance, rounds=1000)  # its bounded exploration amortised
    assert _best_fixed(CPU_CURVE, acceptance)[0] in best_region
    assert policy.trim(policy.k_max, 0) in best_region  # what a draft of this bucket is cut to
    assert achieved >= 0.95 * _best_fixed(CPU_CURVE, acceptance)[1]
    assert policy.verify_cost(5) == pytest.approx(CPU_CURVE[5], rel=0.05)


def test_a_flat_gpu_curve_drafts_long() -> None:
    """On a GPU verification is nearly free: long drafts pay as soon as acceptance is decent."""
    gpu = {n: 20.0 + 0.1 * n for n in range(1, 40)}
    policy = AdaptiveDraftLength()
    _simulate(policy, gpu, acceptance=0.8)
    assert policy.best_k() >= 8


def test_costs_are_interpolated_and_extrapolated_conservatively() -> None:
    policy = AdaptiveDraftLength()
    assert policy.verify_cost(3) is None and policy.next_k() == policy.k_start
    for n, ms in ((1, 10.0), (5, 30.0)):
        policy.observe(drafted=n - 1, draft_s=0.0, verify_s=ms)
    assert policy.verify_cost(3) == pytest.approx(20.0)
    # past the largest measured size: half its average cost per token (30 ms / 5 tokens) each
    assert policy.verify_cost(9) == pytest.approx(30.0 + 4 * 3.0)


def test_confidence_buckets_draft_long_where_drafts_hold_and_not_at_all_where_they_fail() -> None:
    """Like n-gram drafts: a long match is copied reliably, a one-token match rarely."""
    rng = np.random.default_rng(1)
    acceptance = {1: 0.05, 8: 0.95}
    policy = AdaptiveDraftLength()
    tokens = time = 0.0
    for i in range(600):
        bucket = 8 if i % 3 == 0 else 1
        n, ms = _round(policy, rng, acceptance[bucket], CPU_CURVE, bucket, draft_ms_per_token=1e-5)
        tokens += n
        time += ms
    assert policy.drafter_is_cheap() and policy.next_k() == policy.k_max
    assert policy.best_k(1) == 0
    assert policy.best_k(8) >= 4  # past the steep start of the curve: there n = 5 costs 1.8 plain forwards
    # one acceptance rate for all drafts would do worse than plain on two rounds in three
    mixed = 1 / 3 * _best_fixed(CPU_CURVE, 0.95)[1] + 2 / 3 / CPU_CURVE[1]
    assert tokens / time >= 0.9 * mixed


def test_a_costly_drafter_is_asked_for_the_best_k_not_k_max() -> None:
    policy = AdaptiveDraftLength()
    rng = np.random.default_rng(2)
    asked = []
    for _ in range(100):
        asked.append(policy.next_k())
        _round(policy, rng, 0.7, CPU_CURVE, draft_ms_per_token=10.0)
    assert not policy.drafter_is_cheap()
    assert max(asked) < policy.k_max  # never the cheap drafter's k_max
    assert sum(k > 0 for k in asked) >= 70  # mostly a few tokens (a bad run may pause it)
    assert policy.next_k() < policy.k_max


def _measured(policy: AdaptiveDraftLength, curve: dict[int, float]) -> AdaptiveDraftLength:
    for n, ms in curve.items():
        if n <= policy.k_max + 1:
            policy.observe(drafted=n - 1, draft_s=0.0, verify_s=ms)
    return policy


@pytest.mark.parametrize(("caution", "lucky_k"), [(0.0, range(16, 17)), (1.0, range(0, 8))])
def test_caution_keeps_one_lucky_proposal_from_being_trusted_like_a_record(
    caution: float, lucky_k: range
) -> None:
    """A bucket whose one proposal held 16 tokens, in a drafter whose proposals mostly
    fail at once: without caution that one proposal buys a 16-token draft; with it, only
    a bucket that held the same way ten times does."""
    policy = _measured(AdaptiveDraftLength(caution=caution), CPU_CURVE)
    for _ in range(10):
        policy.learn(bucket="other", position=1, kept=False)
    for bucket, times in (("lucky", 1), ("steady", 10)):
        for _ in range(times):
            for position in range(1, 18):
                policy.learn(bucket=bucket, position=position, kept=position <= 16)
    assert policy.best_k("lucky") in lucky_k
    assert policy.best_k("steady") == 16


def test_a_marginal_gain_is_not_drafted() -> None:
    """Where drafting only promises to match plain decoding, it does not draft."""
    policy = _measured(AdaptiveDraftLength(caution=0.0), {1: 100.0, 2: 150.0})
    for _ in range(40):  # acceptance 1/2 at every position: E(1) = 1.5 tokens for 1.5x the cost
        policy.learn(bucket=0, position=1, kept=True)
        policy.learn(bucket=0, position=2, kept=False)
        policy.learn(bucket=0, position=1, kept=False)
    assert policy.trim(1, 0) == 0


def test_a_slow_first_proposal_does_not_stop_drafting() -> None:
    """The first proposal pays for the drafter's setup (an index, a prefill); the drafter is
    asked for k_start tokens until three proposals have shown what drafting costs."""
    policy = AdaptiveDraftLength()
    policy.observe(drafted=0, draft_s=50.0, verify_s=85.0, proposed=4)  # a very slow first proposal
    for _ in range(2):
        assert policy.next_k() == policy.k_start
        policy.observe(drafted=0, draft_s=1e-6, verify_s=85.0, proposed=policy.k_start)
    assert policy.next_k() > 0


def test_fixed_and_invalid_settings() -> None:
    assert FixedDraftLength(3).next_k() == 3 and FixedDraftLength(3).trim(2, 5) == 2
    with pytest.raises(ConfigError):
        FixedDraftLength(-1)
    with pytest.raises(ConfigError):
        AdaptiveDraftLength(k_start=20, k_max=12)


def test_a_deep_copy_drafts_long_from_its_first_sight_and_a_shallow_one_does_not() -> None:
    """Before any record, a copy whose match agrees for 32 tokens is worth a long draft on
    a steep CPU curve; a one-token coincidence is not worth one token."""
    from coinfer.decoding.draft_length import CopyBucket, copy_prior

    policy = _measured(AdaptiveDraftLength(), CPU_CURVE)
    assert policy.trim(48, CopyBucket(32, True)) >= 16
    assert policy.trim(48, CopyBucket(1, False)) == 0
    assert copy_prior(1, 1) == 0.0 and copy_prior(16, 1) == pytest.approx(1 - 1 / 16)
    assert copy_prior(4, 5) == copy_prior(8, 1)  # what counts is how long the copy has agreed


def test_a_deep_copy_that_keeps_failing_stops_being_drafted() -> None:
    from coinfer.decoding.draft_length import CopyBucket

    policy, bucket = _measured(AdaptiveDraftLength(), CPU_CURVE), CopyBucket(16, True)
    for _ in range(12):  # prose that repeats a long phrase, then goes its own way
        policy.learn(bucket=bucket, position=1, kept=False)
    assert policy.trim(48, bucket) == 0


def _copied(policy: AdaptiveDraftLength, *, held: int, proposals: int = 6) -> AdaptiveDraftLength:
    """``proposals`` copies on a 4-token match, each holding for ``held`` positions of 8."""
    from coinfer.decoding.draft_length import CopyBucket

    for _ in range(proposals):
        for position in range(1, min(held + 1, 8) + 1):
            policy.learn(bucket=CopyBucket(4, True), position=position, kept=position <= held)
    return policy


def test_a_request_whose_copies_hold_bets_longer_on_its_next_match_than_one_whose_copies_fail() -> None:
    """The miss ratio carries what one request's copies did to matches it has not drafted
    from yet: rewriting a given function, an 8-token match is worth a long draft; in an
    answer that keeps leaving the text it quotes, the same match is not."""
    from coinfer.decoding.draft_length import CopyBucket

    fresh = _measured(AdaptiveDraftLength(), CPU_CURVE)
    holding = _copied(_measured(AdaptiveDraftLength(), CPU_CURVE), held=8)
    failing = _copied(_measured(AdaptiveDraftLength(), CPU_CURVE), held=0)
    assert holding.copy_miss_ratio() == holding.copy_ratio_floor < 1 < fresh.copy_miss_ratio()
    assert fresh.copy_miss_ratio() < failing.copy_miss_ratio()
    match = CopyBucket(8, True)  # a bucket none of them has a record of
    expected = [p.expected_tokens(16, match) for p in (failing, fresh, holding)]
    assert expected == sorted(expected) and expected[2] > 1.5 * expected[1]
    assert holding.trim(48, match) >= 16 > fresh.trim(48, match) >= failing.trim(48, match)


def test_requests_sharing_a_cost_curve_start_from_what_earlier_ones_measured() -> None:
    shared: dict[int, float] = {}
    first = _measured(AdaptiveDraftLength(costs=shared), CPU_CURVE)
    second = AdaptiveDraftLength(costs=shared)
    assert second.verify_cost(17) == first.verify_cost(17) == CPU_CURVE[17]
    assert AdaptiveDraftLength().verify_cost(17) is None  # one of its own: nothing measured


def test_a_cheap_drafter_is_not_probed_where_drafts_never_pay() -> None:
    """Its proposals are scored without being verified, so a hopeless round buys nothing."""
    policy = AdaptiveDraftLength()
    verified = []
    rng = np.random.default_rng(0)
    for _ in range(200):
        asked = policy.next_k()
        k = policy.trim(asked, 0)
        verified.append(k)
        policy.observe(drafted=k, draft_s=0.0, verify_s=_cost(CPU_CURVE, k + 1) / 1000, proposed=asked)
        matched = int(rng.random() < 0.05)
        for position in range(1, min(matched + 1, asked) + 1):
            policy.learn(bucket=0, position=position, kept=position <= matched)
    assert policy.drafter_is_cheap()
    assert sum(k > 0 for k in verified[20:]) == 0


# Ms of one forward over n tokens on this CPU, whatever its requests (4 rows cost 3.2 one-row
# forwards, 8 rows 7.0: the tiled matmul's dear sizes, ``docs/bench/collective``)
BATCH_CURVE = {1: 32, 2: 61, 4: 104, 5: 118, 8: 225, 12: 276, 16: 276, 24: 408, 32: 457}


def _batch_cost(n: int) -> float:
    return _cost(BATCH_CURVE, n)


def test_a_batch_verifies_one_requests_long_confident_copy_and_no_ones_guesses() -> None:
    copy = [0.99] * 20  # a function being rewritten: each token holds, once the ones before it did
    guesses = [0.5, 0.2, 0.05]  # a shallow match in prose
    assert batch_lengths([copy, guesses, guesses, []], _batch_cost)[0] == 20
    # one request's guesses alone do not pay for a dearer forward of four either
    assert batch_lengths([guesses, guesses, guesses, guesses], _batch_cost) == [0, 0, 0, 0]


def test_with_a_floor_no_request_is_slowed_below_it_by_another_requests_copy() -> None:
    """One request copies, three have nothing to draft: the batch's best rate verifies the
    copy whole, and the three then decode far below their plain rate. With a floor of
    0.97 only a forward at most 3% dearer than plain decoding's is allowed (none here); a
    batch whose every request copies still drafts, since each gains from the forward."""
    copy = [0.99] * 20
    mixed = [copy, [], [], []]

    def slowest(cut: list[int]) -> float:  # the least share of its plain rate any request keeps
        forward = _batch_cost(4 + sum(cut))
        return min((1 + sum(s[:n])) / forward for s, n in zip(mixed, cut, strict=True)) * _batch_cost(4)

    assert slowest(batch_lengths(mixed, _batch_cost)) < 0.6  # what the floor is for
    assert batch_lengths(mixed, _batch_cost, floor=0.97) == [0, 0, 0, 0]
    together = batch_lengths([copy, copy, copy, copy], _batch_cost, floor=0.97)
    assert sum(together) > 4 and min(together) > 0


def test_a_batch_choice_is_the_best_rate_over_every_cut() -> None:
    survivals = [[0.9, 0.8, 0.6, 0.3], [0.95, 0.9], [0.4], [0.99, 0.98, 0.97, 0.96, 0.9, 0.8]]
    k = batch_lengths(survivals, _batch_cost)

    def rate(cut: tuple[int, ...]) -> float:
        gained = 4 + sum(sum(s[:n]) for s, n in zip(survivals, cut, strict=True))
        return gained / _batch_cost(4 + sum(cut))

    every = itertools.product(*(range(len(s) + 1) for s in survivals))
    assert rate(tuple(k)) == pytest.approx(max(rate(c) for c in every))


def test_a_batch_drafts_only_for_the_promised_gain_and_only_once_costs_are_measured() -> None:
    # 4 + 0.9 tokens for 118 ms against 4 for 104: 8% more, over a 5% threshold but not 10%
    assert batch_lengths([[0.9], [], [], []], _batch_cost, required_gain=1.05) == [1, 0, 0, 0]
    assert batch_lengths([[0.9], [], [], []], _batch_cost, required_gain=1.1) == [0, 0, 0, 0]
    assert AdaptiveDraftLength().trim_together([(8, 0), (3, 0)]) == [0, 0]  # no cost measured yet


def _copying_batch(
    forward_s: Callable[[int], float], rounds: int, holds: float = 1.0, slow: dict[int, float] | None = None
) -> list[int]:
    """A batch of 4 whose every request rewrites given code (48-token copies), cut together
    for ``rounds`` rounds on a target whose forward over n tokens takes ``forward_s(n)``,
    after plain decoding measured 1 to 8 tokens (a batch's tail, and a draft of one token
    each) and the sizes in ``slow`` were measured once at those seconds: each round's
    forward size. Earlier copies held to their end, or with ``holds`` below 1 each of their
    tokens held that often (the misses drawn, seeded)."""
    policy = AdaptiveDraftLength(costs=CostCurve(), batch_floor=0.97)
    for n in (1, 2, 3, 4, 8):
        policy.observe(drafted=n - 1, draft_s=0.0, verify_s=forward_s(n))
    for n, seconds in (slow or {}).items():
        policy.observe(drafted=n - 1, draft_s=0.0, verify_s=seconds)
    rng = np.random.default_rng(0)
    for _ in range(24):  # earlier copies
        for position in range(1, 49):
            kept = bool(rng.random() < holds)
            policy.learn(bucket=CopyBucket(16, True), position=position, kept=kept)
            if not kept:
                break
    sizes = []
    for _ in range(rounds):
        cut = policy.trim_together([(48, CopyBucket(16, True))] * 4)
        sizes.append(4 + sum(cut))
        policy.observe(drafted=sizes[-1] - 1, draft_s=0.0, verify_s=forward_s(sizes[-1]))
    return sizes


def test_a_batch_learns_what_a_longer_forward_costs_a_doubling_at_a_time() -> None:
    """Every request of a batch of 4 copies with confidence. On a curve like this CPU's
    one-sequence table (about 33 ms a token from 4 tokens to 196: 0.13 s and 7.0 s), no
    draft pays: the batch tries each doubling once, priced at a guess below what it costs,
    and decodes plainly once the measurements say so. Where a forward costs about what
    one token does (a GPU's), the same rule lets the drafts grow a doubling a round to the
    whole copies."""
    cpu = _copying_batch(lambda n: {1: 0.053, 2: 0.091, 3: 0.124}.get(n, 0.033 * n), rounds=40)
    assert cpu[:4] == [16, 32, 64, 128] and set(cpu[4:]) == {4}
    gpu = _copying_batch(lambda n: 0.006 + 0.0001 * n, rounds=8)
    assert gpu[:3] == [16, 32, 64] and gpu[-1] > 128


# A batch of 4 rows on this CPU (s of one forward over n tokens): from 8 rows llama.cpp takes
# a kernel that costs little per row more, so 8 tokens cost nearly twice 4, and 16 not twice 8
KINKED = {1: 0.045, 2: 0.09, 3: 0.117, 4: 0.16, 8: 0.30, 12: 0.316, 16: 0.396, 32: 0.70, 64: 1.05, 92: 1.7}


def test_copies_that_mostly_hold_grow_past_a_costly_eight_token_forward() -> None:
    """Plain decoding and one draft token a request measured 4 and 8 tokens, 8 at nearly
    twice 4. Priced from that stretch, 16 tokens looked to cost 0.58 s, and copies whose
    every token held 0.9 of the time never went past 8, where 16 cost 0.40 s: the batch
    drafted nothing (run I, ``docs/bench/collective``). Priced by the guess, it tries 16,
    measures it and keeps drafting past 8."""
    sizes = _copying_batch(lambda n: _cost(KINKED, n), rounds=12, holds=0.9)
    assert sizes[0] == 16 and min(sizes) > 8


def test_a_batch_whose_plain_steps_run_as_several_passes_still_learns_longer_steps() -> None:
    """Eight requests on streams that are not consecutive (0-2 and 4-8): llama.cpp runs each
    plain step as passes of 3 and 5 rows, so the curve's largest point is 5. A step may bring
    twice the largest step measured (8 rows), not twice the largest pass: with 10 the most
    (2 draft tokens in all), no draft paid, none was verified, nothing larger was measured,
    and a fresh server's batch drafted next to nothing for a whole run."""
    streams = [0, 1, 2, 4, 5, 6, 7, 8]
    policy = AdaptiveDraftLength(costs=CostCurve())
    for _ in range(3):
        plain_s = (_batch_cost(3) + _batch_cost(5)) / 1000
        policy.observe(drafted=7, draft_s=0.0, verify_s=plain_s, passes=[3, 5])
    for _ in range(24):  # copies of given code that held to their end
        for position in range(1, 49):
            policy.learn(bucket=CopyBucket(32, True), position=position, kept=True)
    cut = policy.trim_together(
        [(48, CopyBucket(32, True))] * 8, lambda rows: split_passes(list(zip(streams, rows, strict=True)))
    )
    assert sum(cut) > 2


def test_a_size_measured_dear_once_is_tried_again_once_its_measurement_is_old() -> None:
    """16 tokens measured once in a slow minute at 0.70 s, where they cost 0.40 s: while
    that measurement is among the latest ``refresh_every`` forwards, copies that hold 0.9
    of the time do not pay for it, and the batch decodes plainly. Then the batch's cut is
    priced without it, so the batch tries a doubling again, measures 16 at what it costs
    and drafts past 8 from then on. Priced by every point of the curve, as before, the one
    dear measurement stood for good (the tune half's followup, ``docs/bench/collective``)."""
    sizes = _copying_batch(lambda n: _cost(KINKED, n), rounds=100, holds=0.9, slow={16: 0.70})
    assert set(sizes[:60]) == {4}
    assert min(sizes[-20:]) > 8


def test_drafts_cut_together_are_scored_whole_and_a_fixed_policy_keeps_them() -> None:
    policy = AdaptiveDraftLength(costs={n: float(c) for n, c in BATCH_CURVE.items()})
    for _ in range(6):  # this run's deep copies have held
        for position in range(1, 21):
            policy.learn(bucket=CopyBucket(12, True), position=position, kept=True)
    sizer = DraftSizer(policy)
    long = Draft(list(range(10, 30)), bucket=CopyBucket(12, True))
    short = Draft([7, 8], bucket=CopyBucket(1, False))
    cut = sizer.cut_together([(0, 5, long), (1, 5, short)], others=2)
    assert len(cut[0].tokens) > 8 and cut[1].tokens == []
    sizer.learn(1, [0] * 5 + [7, 8])  # the trimmed short draft held: its record learns so all the same
    assert policy.survival(CopyBucket(1, False))[2] > AdaptiveDraftLength().survival(CopyBucket(1, False))[2]
    fixed = DraftSizer(FixedDraftLength(3)).cut_together([(0, 5, long), (1, 5, short)])
    assert [d.tokens for d in fixed] == [long.tokens, short.tokens]


def test_a_point_of_the_curve_nobody_measures_goes_stale_and_its_next_measurement_replaces_it() -> None:
    curve = CostCurve()
    curve.record(4, 0.47, smoothing=0.3, refresh=64)  # plain decoding while another process ran
    curve.record(4, 0.15, smoothing=0.3, refresh=64)
    assert curve[4] == pytest.approx(0.7 * 0.47 + 0.3 * 0.15)  # fresh: a moving average
    for _ in range(65):
        curve.record(7, 0.30, smoothing=0.3, refresh=64)
    assert curve.stale(4, refresh=64) and not curve.stale(7, refresh=64) and not curve.stale(5, refresh=64)
    curve.record(4, 0.15, smoothing=0.3, refresh=64)
    assert curve[4] == 0.15 and not curve.stale(4, refresh=64)


def test_a_points_floor_is_the_least_of_its_latest_measurements() -> None:
    curve = CostCurve({2: 0.08})  # set, never measured: its value is its floor
    for seconds in (0.131, 0.40, 0.14):  # one forward slowed by another process
        curve.record(4, seconds, smoothing=0.3, refresh=64)
    assert curve[4] > 0.15 and curve.floors() == {2: 0.08, 4: 0.131}
    for _ in range(5):  # the machine really slowed: the floor follows after five forwards
        curve.record(4, 0.2, smoothing=0.3, refresh=64)
    assert curve.floors()[4] == 0.2


def test_a_slow_moment_in_plain_decodings_point_does_not_lock_a_batch_into_drafting() -> None:
    """Plain decoding's point for a batch of 4 was measured slow (0.47 s); a forward of 7
    tokens really costs 0.30 s, so drafting 3 tokens looks free and every round drafts,
    and nothing would measure the point again. Once it is ``refresh_every`` forwards old
    the batch decodes plainly once, and that measurement stands."""
    policy = AdaptiveDraftLength(costs=CostCurve(), refresh_every=64)
    policy.observe(drafted=3, draft_s=0.0, verify_s=0.47)  # a batch of 4 with no drafts: 4 tokens
    guesses = [(3, CopyBucket(32, True))] + [(0, None)] * 3
    cuts = []
    for _ in range(80):
        cut = policy.trim_together(guesses)
        cuts.append(sum(cut))
        policy.observe(drafted=3 + sum(cut), draft_s=0.0, verify_s=0.15 if not sum(cut) else 0.30)
    assert cuts[0] > 0  # the stale point's lie, believed for a while
    assert 0 in cuts and policy.costs[4] == 0.15
    after = cuts[cuts.index(0) :]
    assert all(c == 0 for c in after)  # measured again, drafting 3 tokens for 0.58 more no longer pays


def test_one_requests_policy_measures_plain_decoding_again_when_its_point_is_stale() -> None:
    policy = AdaptiveDraftLength(costs=CostCurve(), refresh_every=8)
    policy.observe(drafted=0, draft_s=0.0, verify_s=0.1)
    for _ in range(4):
        for position in range(1, 9):
            policy.learn(bucket=CopyBucket(32, True), position=position, kept=True)
    ks = []
    for _ in range(12):
        ks.append(policy.trim(8, CopyBucket(32, True)))
        policy.observe(drafted=ks[-1], draft_s=0.0, verify_s=0.1 + 0.01 * ks[-1])
    assert ks[0] > 0 and ks.count(0) == 1 and ks.index(0) == 9  # plain once, after 9 forwards that drafted


def test_floors_within_the_latest_forwards_leave_out_a_point_measured_only_before_them() -> None:
    """The halves of a batch, measured once in a fast minute (2 tokens: 0.06 s), against
    the whole measured since in a slow one (4 tokens: 0.19 s): on all floors two halves
    look cheaper; within the latest forwards the halves are not measured, so no cut."""
    from coinfer.decoding.split import FLOOR_WINDOW, split_forward

    curve = CostCurve()
    curve.record(2, 0.06, smoothing=0.3, refresh=64)
    for _ in range(FLOOR_WINDOW + 1):
        curve.record(4, 0.19, smoothing=0.3, refresh=64)
    assert split_forward([1] * 4, curve.floors()) == 2
    assert curve.floors(within=FLOOR_WINDOW) == {4: 0.19}
    assert split_forward([1] * 4, curve.floors(within=FLOOR_WINDOW)) == 0
    curve.record(2, 0.11, smoothing=0.3, refresh=64)  # measured again: back in, at its new cost
    assert curve.floors(within=FLOOR_WINDOW) == {2: 0.11, 4: 0.19}


def test_the_fresh_curve_is_the_points_measured_among_the_latest_forwards() -> None:
    curve = CostCurve({2: 0.08})  # set, never measured: always in
    curve.record(16, 0.70, smoothing=0.3, refresh=64)  # a slow minute
    for _ in range(10):
        curve.record(4, 0.15, smoothing=0.3, refresh=64)
    assert curve.fresh(within=11) == {2: 0.08, 16: 0.70, 4: 0.15}
    assert curve.fresh(within=10) == {2: 0.08, 4: 0.15}


def test_survival_up_to_a_drafts_length_is_the_start_of_the_whole_curve() -> None:
    """A batch's round asks each bucket only as far as its draft goes; the answer is the
    same as the full curve's, whatever the bucket's record."""
    policy = AdaptiveDraftLength()
    for position, kept in ((1, True), (2, True), (3, False), (1, False)):
        for bucket in (CopyBucket(6, True), "prose"):
            policy.learn(bucket=bucket, position=position, kept=kept)
    for bucket in (None, CopyBucket(6, True), CopyBucket(30, True), "prose", "never seen"):
        full = policy.survival(bucket)
        for upto in (0, 1, 5, policy.k_max, policy.k_max + 9):
            assert policy.survival(bucket, upto=upto) == full[: upto + 1]
