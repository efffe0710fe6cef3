"""Choosing k: the adaptive policy against scripted cost curves and acceptance rates."""

from __future__ import annotations

import numpy as np
import pytest

from coinfer.decoding.draft_length import AdaptiveDraftLength, FixedDraftLength
from coinfer.errors import ConfigError

# Measured shape on this CPU for qwen2.5-coder-1.5b (ms of one forward over n tokens, n = k + 1)
CPU_CURVE = {1: 85, 2: 128, 3: 140, 4: 144, 5: 150, 6: 200, 7: 240, 8: 263, 9: 300, 17: 323, 33: 552}


def _cost(curve: dict[int, float], n: int) -> float:
    sizes = sorted(curve)
    lo = max(s for s in sizes if s <= n)
    hi = min((s for s in sizes if s >= n), default=lo)
    return curve[lo] if hi == lo else curve[lo] + (curve[hi] - curve[lo]) * (n - lo) / (hi - lo)


def _simulate(policy, curve: dict[int, float], acceptance: float, rounds: int = 400, seed: int = 0) -> float:  # type: ignore[no-untyped-def]
    """Tokens per ms achieved by ``policy`` with a geometric drafter of the given acceptance."""
    rng = np.random.default_rng(seed)
    tokens = time = 0.0
    for _ in range(rounds):
        k = policy.next_k()
        accepted = 0
        while accepted < k and rng.random() < acceptance:
            accepted += 1
        verify = _cost(curve, k + 1)
        policy.observe(drafted=k, accepted=accepted, draft_s=0.0, verify_s=verify)
        tokens += accepted + 1
        time += verify
    return tokens / time


def _best_fixed(curve: dict[int, float], acceptance: float, k_max: int = 12) -> tuple[int, float]:
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
    assert policy.acceptance < 0.5  # below the prior, after only the few rounds it took to give up


def test_with_good_drafts_it_finds_the_cheap_end_of_a_steep_curve() -> None:
    policy = AdaptiveDraftLength()
    _simulate(policy, CPU_CURVE, acceptance=0.9)
    best, _ = _best_fixed(CPU_CURVE, 0.9)
    assert abs(policy.best_k() - best) <= 1
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
        policy.observe(drafted=n - 1, accepted=0, draft_s=0.0, verify_s=ms)
    assert policy.verify_cost(3) == pytest.approx(20.0)
    assert policy.verify_cost(9) == pytest.approx(50.0)  # the last measured slope continues


def test_fixed_and_invalid_settings() -> None:
    assert FixedDraftLength(3).next_k() == 3
    with pytest.raises(ConfigError):
        FixedDraftLength(-1)
    with pytest.raises(ConfigError):
        AdaptiveDraftLength(k_start=20, k_max=12)
