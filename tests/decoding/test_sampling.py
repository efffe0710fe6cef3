"""Sampling: parameter validation, temperature / top-k / top-p distributions, seeded draws."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coinfer.decoding.sampling import SamplingParams, probs_from_logits, sample
from coinfer.errors import ConfigError

LOGITS = np.array([1.5, -0.25, 3.0, 0.5, 2.25, -1.0, 0.0, 2.0])


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


# ---- SamplingParams --------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -0.1},
        {"temperature": -1e-9},
        {"top_k": -1},
        {"top_p": 0.0},
        {"top_p": -0.5},
        {"top_p": 1.0000001},
        {"top_p": 2.0},
        {"top_p": math.nan},
    ],
)
def test_invalid_params_raise_config_error(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        SamplingParams(**kwargs)  # type: ignore[arg-type]


def test_nan_temperature_raises_config_error() -> None:
    with pytest.raises(ConfigError):
        SamplingParams(temperature=math.nan)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"temperature": 0.0}, {"temperature": 2.0, "top_k": 0, "top_p": 1.0}, {"top_k": 5, "top_p": 1e-6}],
)
def test_valid_params_are_accepted(kwargs: dict[str, float]) -> None:
    params = SamplingParams(**kwargs)  # type: ignore[arg-type]
    assert params.greedy == (params.temperature == 0.0)


# ---- probs_from_logits -----------------------------------------------------------------


def test_temperature_zero_is_one_hot_at_argmax() -> None:
    # top-k / top-p must not matter when greedy
    for params in (SamplingParams(), SamplingParams(temperature=0.0, top_k=3, top_p=0.1)):
        p = probs_from_logits(LOGITS, params)
        expected = np.zeros(LOGITS.size)
        expected[2] = 1.0
        np.testing.assert_array_equal(p, expected)
        assert p.dtype == np.float64


def test_greedy_ties_pick_the_first_maximum() -> None:
    p = probs_from_logits(np.array([0.0, 5.0, 1.0, 5.0]), SamplingParams())
    np.testing.assert_array_equal(p, [0.0, 1.0, 0.0, 0.0])


def test_float32_logits_give_a_float64_distribution() -> None:
    p = probs_from_logits(LOGITS.astype(np.float32), SamplingParams(temperature=1.0))
    assert p.dtype == np.float64
    assert p.shape == LOGITS.shape
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("temperature", [0.25, 0.7, 1.0, 1.5, 4.0])
def test_temperature_scaling_is_softmax_of_scaled_logits(temperature: float) -> None:
    p = probs_from_logits(LOGITS, SamplingParams(temperature=temperature))
    # by hand: exp(l / T) / sum exp(l / T)
    num = [math.exp(v / temperature) for v in LOGITS]
    expected = np.array([n / sum(num) for n in num])
    np.testing.assert_allclose(p, expected, rtol=1e-12, atol=1e-15)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_higher_temperature_flattens_the_distribution() -> None:
    cold = probs_from_logits(LOGITS, SamplingParams(temperature=0.5))
    hot = probs_from_logits(LOGITS, SamplingParams(temperature=3.0))
    assert hot.max() < cold.max()
    assert hot.min() > cold.min()


def test_large_logits_do_not_overflow() -> None:
    p = probs_from_logits(np.array([1000.0, 999.0, -1000.0]), SamplingParams(temperature=1.0))
    np.testing.assert_allclose(p[:2], _softmax(np.array([1.0, 0.0])), rtol=1e-12)
    assert p[2] == 0.0
    assert np.isfinite(p).all()


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
def test_top_k_keeps_exactly_the_k_largest(k: int) -> None:
    p = probs_from_logits(LOGITS, SamplingParams(temperature=1.0, top_k=k))
    largest = set(np.argsort(-LOGITS)[:k].tolist())
    assert set(np.flatnonzero(p).tolist()) == largest
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    # the kept tokens keep their relative weights: softmax over the kept logits alone
    keep = sorted(largest)
    np.testing.assert_allclose(p[keep], _softmax(LOGITS[keep]), rtol=1e-12)


@pytest.mark.parametrize("k", [0, 8, 100])
def test_top_k_zero_or_at_least_vocab_keeps_everything(k: int) -> None:
    p = probs_from_logits(LOGITS, SamplingParams(temperature=1.0, top_k=k))
    np.testing.assert_allclose(p, _softmax(LOGITS), rtol=1e-12)


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [
        (0.3, 1),  # 0.5 already reaches it
        (0.75, 2),  # 0.5 < 0.75 <= 0.8
        (0.79, 2),
        (0.81, 3),  # 0.8 < 0.81 <= 0.95
        (0.9, 3),
        (0.96, 4),
        (0.9999, 4),
    ],
)
def test_top_p_keeps_the_smallest_head_reaching_p(top_p: float, kept: int) -> None:
    probs = np.array([0.15, 0.5, 0.05, 0.3])  # sorted: 0.5 (1), 0.3 (3), 0.15 (0), 0.05 (2)
    by_rank = [1, 3, 0, 2]
    p = probs_from_logits(np.log(probs), SamplingParams(temperature=1.0, top_p=top_p))
    assert set(np.flatnonzero(p).tolist()) == set(by_rank[:kept])
    head = by_rank[:kept]
    np.testing.assert_allclose(p[head], probs[head] / probs[head].sum(), rtol=1e-12)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_top_p_first_two_of_half_three_tenths() -> None:
    # probs 0.5, 0.3, 0.15, 0.05 with top_p 0.78: the first two (mass 0.8) are the smallest head.
    # (top_p exactly 0.8 is a rounding tie: exp(log 0.3 - log 0.5) * 0.5 comes back 1 ulp low.)
    p = probs_from_logits(np.log([0.5, 0.3, 0.15, 0.05]), SamplingParams(temperature=1.0, top_p=0.78))
    np.testing.assert_allclose(p, [0.625, 0.375, 0.0, 0.0], rtol=1e-12)


def test_top_k_is_applied_before_top_p() -> None:
    # top_k=2 leaves 0.5 / 0.3 renormalised to 0.625 / 0.375; top_p=0.6 then keeps only the first
    logits = np.log([0.5, 0.3, 0.15, 0.05])
    p = probs_from_logits(logits, SamplingParams(temperature=1.0, top_k=2, top_p=0.6))
    np.testing.assert_array_equal(p, [1.0, 0.0, 0.0, 0.0])
    # without top-k, 0.6 > 0.5 needs the second token too
    p = probs_from_logits(logits, SamplingParams(temperature=1.0, top_p=0.6))
    np.testing.assert_allclose(p, [0.625, 0.375, 0.0, 0.0], rtol=1e-12)


def test_temperature_is_applied_before_top_p() -> None:
    # at T=0.5 the probs become (5, 3, 1)^2 / 35 = 25/35, 9/35, 1/35: top_p=0.7 keeps one token
    logits = np.log([5.0, 3.0, 1.0])
    p = probs_from_logits(logits, SamplingParams(temperature=0.5, top_p=0.7))
    np.testing.assert_array_equal(p, [1.0, 0.0, 0.0])
    p = probs_from_logits(logits, SamplingParams(temperature=1.0, top_p=0.7))
    np.testing.assert_allclose(p, [5 / 8, 3 / 8, 0.0], rtol=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    logits=st.lists(st.integers(-400, 400).map(lambda i: i / 8), min_size=1, max_size=40),
    temperature=st.sampled_from([0.0, 0.05, 0.3, 1.0, 2.5, 10.0]),
    top_k=st.integers(0, 45),
    top_p=st.floats(1e-6, 1.0),
)
def test_distribution_properties(logits: list[float], temperature: float, top_k: int, top_p: float) -> None:
    x = np.array(logits)
    p = probs_from_logits(x, SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p))
    assert p.shape == x.shape
    assert np.isfinite(p).all()
    assert (p >= 0).all()
    assert p.sum() == pytest.approx(1.0, abs=1e-9)
    assert p[int(np.argmax(x))] > 0
    kept = p > 0
    if 0 < top_k < x.size:
        # at most the k largest (ties with the k-th largest are kept together)
        assert kept.sum() <= (x >= np.sort(x)[-top_k]).sum()
    if not kept.all():
        # what is kept is a head of the ranking: no dropped token is more likely than a kept one
        assert x[kept].min() >= x[~kept].max()
    if temperature > 0:
        # kept tokens keep their relative weights
        np.testing.assert_allclose(p[kept], _softmax(x[kept] / temperature), rtol=1e-9, atol=1e-300)


# ---- sample ----------------------------------------------------------------------------


def test_same_seed_draws_the_same_tokens() -> None:
    probs = _softmax(LOGITS)
    a = [sample(probs, np.random.default_rng(1234)) for _ in range(3)]
    r1, r2 = np.random.default_rng(7), np.random.default_rng(7)
    seq1 = [sample(probs, r1) for _ in range(200)]
    seq2 = [sample(probs, r2) for _ in range(200)]
    assert seq1 == seq2
    assert len(set(a)) == 1
    r3 = np.random.default_rng(8)
    assert [sample(probs, r3) for _ in range(200)] != seq1


def test_one_hot_always_gives_its_token() -> None:
    rng = np.random.default_rng(0)
    probs = np.zeros(50)
    probs[17] = 1.0
    assert {sample(probs, rng) for _ in range(100)} == {17}


def test_zero_probability_tokens_are_never_drawn() -> None:
    rng = np.random.default_rng(3)
    probs = probs_from_logits(LOGITS, SamplingParams(temperature=5.0, top_k=3))
    drawn = {sample(probs, rng) for _ in range(2000)}
    assert drawn == set(np.flatnonzero(probs).tolist())


def test_empirical_frequencies_match_the_distribution() -> None:
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    n = 20_000
    rng = np.random.default_rng(2024)
    draws = np.array([sample(probs, rng) for _ in range(n)])
    assert isinstance(sample(probs, rng), int)
    observed = np.bincount(draws, minlength=4)
    expected = probs * n
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 16.27, (chi2, observed)  # 0.999 quantile of chi-square with 3 degrees of freedom
    # and a clearly different distribution is rejected by the same statistic
    wrong = np.full(4, n / 4)
    assert float(((observed - wrong) ** 2 / wrong).sum()) > 16.27


def _by_definition(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Temperature, top-k and top-p as written: the whole vocabulary sorted, summed in order."""
    x = np.asarray(logits, dtype=np.float64) / params.temperature
    if 0 < params.top_k < x.size:
        x = np.where(x < np.partition(x, -params.top_k)[-params.top_k], -np.inf, x)
    p = np.exp(x - np.max(x))
    p /= p.sum()
    if params.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        keep = order[: int(np.searchsorted(np.cumsum(p[order]), params.top_p) + 1)]
        cut = np.zeros_like(p)
        cut[keep] = p[keep]
        p = cut / cut.sum()
    return p


def _drawn_by_definition(probs: np.ndarray, u: float) -> int:
    cdf = np.cumsum(probs)
    return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), probs.size - 1)


@pytest.mark.parametrize("vocab", [7, 1000, 151_936])
def test_fast_cuts_and_draws_are_the_definitions_to_the_bit(vocab: int) -> None:
    """A large vocabulary is cut and drawn from without sorting or summing all of it
    (a stable sort of 150k logits took 36 ms here). The distributions and the tokens drawn
    are exactly the definitions', ties and flat distributions included, so a seeded
    request writes the same text."""
    from coinfer.decoding.sampling import sample_at

    rng = np.random.default_rng(vocab)
    for trial in range(12):
        logits = (rng.standard_normal(vocab) * (0.3, 3.0, 12.0)[trial % 3]).astype(np.float32)
        if trial % 4 == 0:
            logits = np.round(logits)  # many ties
        for params in (
            SamplingParams(temperature=0.7, top_p=0.9), SamplingParams(temperature=1.3, top_p=0.999999),
            SamplingParams(temperature=1.0, top_k=40), SamplingParams(temperature=0.5, top_k=5, top_p=0.5),
            SamplingParams(temperature=1.0, top_p=0.05), SamplingParams(temperature=0.9),
        ):  # fmt: skip
            fast, slow = probs_from_logits(logits, params), _by_definition(logits, params)
            assert np.array_equal(fast, slow), params
            for u in (0.0, 0.5, 0.999999, float(rng.random())):
                assert sample_at(fast, u) == _drawn_by_definition(slow, u)
    massless = np.zeros(vocab)
    assert sample_at(massless, 0.5) == _drawn_by_definition(massless, 0.5)


@pytest.mark.parametrize("vocab", [100, 4096, 4097, 151_936])
def test_a_dense_draw_by_blocks_is_the_whole_running_sums(vocab: int) -> None:
    """A distribution with mass nearly everywhere (a temperature, no cut) is drawn from
    block by block, not by a running sum over the whole vocabulary (0.42 ms a row on a
    150k vocabulary): the token is the whole running sum's, at every draw tried, for a
    vocabulary shorter than a block, one block long, one token over, and Qwen's."""
    from coinfer.decoding.sampling import sample_at

    rng = np.random.default_rng(vocab + 1)
    for scale in (0.5, 3.0, 8.0):
        probs = probs_from_logits(
            (rng.standard_normal(vocab) * scale).astype(np.float32), SamplingParams(temperature=0.7)
        )
        for u in (0.0, 1.0 - 1e-12, *rng.random(200)):
            assert sample_at(probs, float(u)) == _drawn_by_definition(probs, float(u))


def test_the_callers_logits_are_left_as_they_were() -> None:
    """The distribution is built in place in a copy: logits a caller keeps (a verifier's
    rows, float32 or float64) come back unchanged, and so does a distribution drawn from."""
    from coinfer.decoding.sampling import sample_at

    rng = np.random.default_rng(5)
    for dtype in (np.float32, np.float64):
        logits = (rng.standard_normal(1000) * 3).astype(dtype)
        kept = logits.copy()
        for params in (SamplingParams(temperature=0.8), SamplingParams(temperature=0.8, top_k=7)):
            probs = probs_from_logits(logits, params)
            drawn = probs.copy()
            sample_at(probs, 0.3)
            assert np.array_equal(logits, kept) and np.array_equal(probs, drawn)
            assert np.array_equal(probs, _by_definition(kept, params))
