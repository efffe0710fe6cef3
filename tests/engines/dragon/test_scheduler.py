"""The aggregation side's scheduler (Eq. 6-8) and the corollaries of §5-6."""

from __future__ import annotations

import pytest

from coinfer.engines.dragon.scheduler import CLOUD, DEVICE, Profile, choose_aggregator, latency_per_token


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
