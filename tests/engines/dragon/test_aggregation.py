"""Output aggregation and Speculative Aggregation (paper 003, Eq. 2/4, Algorithm 1)."""

from __future__ import annotations

import numpy as np
import pytest

from coinfer.engines.dragon.aggregation import (
    Uniforms,
    greedy_aggregate,
    local_mixture,
    mixture,
    side_weight,
    speculative_aggregate,
)
from coinfer.errors import ConfigError

P_A = np.array([0.50, 0.25, 0.15, 0.05, 0.05, 0.00])
P_B = np.array([0.05, 0.10, 0.05, 0.40, 0.10, 0.30])
CHI2_999_5DOF = 20.52  # 0.999 quantile of chi-square with 5 degrees of freedom


def _draws(eta_a: float, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    counts = np.zeros(P_A.size)
    accepted = 0
    for i in range(n):
        x_a, x_b = int(rng.choice(6, p=P_A)), int(rng.choice(6, p=P_B))
        out = speculative_aggregate(x_a, P_A, x_b, P_B, eta_a, Uniforms.at(seed, i))
        counts[out.token] += 1
        accepted += out.accepted_a
    return counts


@pytest.mark.parametrize("eta_a", [0.2, 0.5, 0.85])
def test_speculative_aggregation_samples_the_mixture(eta_a: float) -> None:
    n = 20_000
    expected = mixture(P_A, P_B, eta_a) * n
    observed = _draws(eta_a, n, seed=int(eta_a * 100))
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < CHI2_999_5DOF, (chi2, observed, expected)


def test_when_both_sides_agree_every_draft_is_accepted() -> None:
    for i in range(200):
        out = speculative_aggregate(3, P_B, 3, P_B, 0.4, Uniforms.at(1, i))
        assert (out.token, out.accepted_a, out.accepted_b) == (3, True, True)


def test_greedy_takes_the_mixtures_most_likely_token() -> None:
    # a's favourite is 0, b's is 3; with b weighted 0.6 the mixture's is 3
    out = greedy_aggregate(0, P_A, 3, P_B, 0.4)
    assert (out.token, out.accepted_a, out.accepted_b) == (3, False, True)
    assert greedy_aggregate(0, P_A, 3, P_B, 0.9).token == 0


def test_the_local_mixture_weights_documents_by_the_softmax_of_relevance() -> None:
    docs = np.stack([P_A, P_B])
    p, log_h = local_mixture(docs, np.array([np.log(3.0), 0.0]))
    assert p == pytest.approx(0.75 * P_A + 0.25 * P_B)
    assert log_h == pytest.approx(np.log(4.0))
    # huge scores stay finite (App. A.1's log-sum-exp)
    p, log_h = local_mixture(docs, np.array([1000.0, 1000.0]))
    assert np.isfinite(log_h) and p == pytest.approx(0.5 * P_A + 0.5 * P_B)


def test_two_sides_mixed_by_their_h_equal_one_mixture_over_all_documents() -> None:
    docs, scores = np.stack([P_A, P_B, np.full(6, 1 / 6)]), np.array([0.3, -1.2, 2.0])
    everything, _ = local_mixture(docs, scores)
    p_a, h_a = local_mixture(docs[:2], scores[:2])
    p_b, h_b = local_mixture(docs[2:], scores[2:])
    assert mixture(p_a, p_b, side_weight(h_a, h_b)) == pytest.approx(everything)


def test_a_score_per_document_is_required() -> None:
    with pytest.raises(ConfigError):
        local_mixture(np.stack([P_A, P_B]), np.array([1.0]))
