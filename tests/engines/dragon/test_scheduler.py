"""The aggregation side's scheduler (Eq. 6-8) and the corollaries of §5-6."""

from __future__ import annotations

import pytest

from coinfer.engines.dragon.scheduler import (
    CLOUD,
    DEVICE,
    LiveScheduler,
    Profile,
    choose_aggregator,
    latency_per_token,
    simulate,
)


def test_eq7_is_the_waiting_time_weighted_by_the_remotes_acceptance() -> None:
    assert latency_per_token(1.0, 1.5, 3.0, 1.0) == 1.5  # all accepted: the slower decoder
    assert latency_per_token(1.0, 1.5, 3.0, 0.0) == 4.5  # all rejected: decode plus a round trip
    assert latency_per_token(1.0, 1.5, 3.0, 0.5) == pytest.approx(3.0)
    assert latency_per_token(10.0, 1.5, 3.0, 0.0) == 10.0  # a slow local side hides the network


def test_the_slower_decoder_aggregates_when_it_is_the_bottleneck() -> None:
    # Eq. 8's outer cases: the bottleneck side aggregates whatever the acceptance
    assert choose_aggregator(CLOUD, (2.0, 0.1), 0.5, (0.5, 0.5)) == DEVICE
    assert choose_aggregator(DEVICE, (0.1, 2.0), 0.5, (0.5, 0.5)) == CLOUD


def test_on_a_slow_link_the_side_whose_drafts_are_rejected_more_aggregates() -> None:
    # equal decoders: the aggregator waits a round trip after each rejection of the other's draft
    assert choose_aggregator(DEVICE, (0.1, 0.1), 0.3, (0.9, 0.4)) == CLOUD  # the cloud's drafts fail more
    assert choose_aggregator(CLOUD, (0.1, 0.1), 0.3, (0.4, 0.9)) == DEVICE


def test_a_tie_keeps_the_current_side() -> None:
    assert choose_aggregator(CLOUD, (0.1, 0.1), 0.3, (0.7, 0.7)) == CLOUD
    assert choose_aggregator(DEVICE, (0.1, 0.1), 0.3, (0.7, 0.7)) == DEVICE


def test_the_profile_chooses_only_once_everything_was_measured() -> None:
    p = Profile(zeta=0.5)
    p.decoded(DEVICE, 0.1)
    p.decoded(CLOUD, 0.1)
    p.judged(DEVICE, True)
    assert p.choose(DEVICE) == DEVICE  # no RTT, no cloud acceptance yet
    p.judged(CLOUD, False)
    p.round_trip(0.3)
    assert p.choose(DEVICE) == CLOUD
    p.judged(DEVICE, False)
    p.judged(CLOUD, True)
    assert p.acceptance == [0.5, 0.5] and p.choose(CLOUD) == CLOUD


def test_a_small_gain_does_not_move_the_aggregator_under_a_margin() -> None:
    # the cloud aggregating would be 5% faster: worth it without a margin, not with 10%
    decode, rtt, acceptance = (0.1, 0.1), 0.3, (0.9, 0.88)
    assert latency_per_token(0.1, 0.1, rtt, 0.88) / latency_per_token(0.1, 0.1, rtt, 0.9) < 1.06
    assert choose_aggregator(DEVICE, decode, rtt, acceptance) == CLOUD
    assert choose_aggregator(DEVICE, decode, rtt, acceptance, margin=0.1) == DEVICE


def test_the_live_scheduler_waits_min_gap_positions_between_moves() -> None:
    live = LiveScheduler(margin=0.0, min_gap=4, profile=Profile(zeta=1.0))
    for s in (DEVICE, CLOUD):
        live.profile.decoded(s, 0.1)
    live.profile.judged(DEVICE, True)
    live.profile.judged(CLOUD, False)
    live.profile.round_trip(0.3)
    assert live.next_side(DEVICE, 2) == DEVICE  # too soon after the start
    assert live.next_side(DEVICE, 4) == CLOUD and live.moved_at == 4
    live.profile.judged(DEVICE, False)
    live.profile.judged(CLOUD, True)
    assert live.next_side(CLOUD, 6) == CLOUD  # too soon after the move
    assert live.next_side(CLOUD, 8) == DEVICE


def test_the_simulated_live_policy_follows_the_side_whose_drafts_fail() -> None:
    """A recorded answer whose cloud drafts fail in the first half and the device's in the
    second: each fixed side is slow in one half, the live scheduler moves once and beats
    both (the simulator of §7.4)."""
    half = 40
    trace = [(True, False)] * half + [(False, True)] * half
    decode, rtt = (0.1, 0.1), 0.3
    device, _ = simulate(decode, rtt, trace, DEVICE)
    cloud, _ = simulate(decode, rtt, trace, CLOUD)
    assert device == pytest.approx(half * 0.1 + half * 0.4)  # waits a round trip in the first half
    assert cloud == pytest.approx(device)
    live, moves = simulate(decode, rtt, trace, LiveScheduler())
    assert moves == 2 and live < 0.8 * min(device, cloud)
