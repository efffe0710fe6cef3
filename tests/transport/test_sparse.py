"""Distributions on the wire: the head that is sent is the one both ends compute with, and
malformed bytes are refused."""

from __future__ import annotations

import numpy as np
import pytest

from coinfer.errors import ConfigError, TransportError
from coinfer.transport import decode, encode, sparsify

QWEN_VOCAB = 151_936


def _peaked(vocab: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=vocab) * 4
    p = np.exp(x - x.max())
    return p / p.sum()


def test_the_head_holds_top_p_of_the_mass_most_likely_first() -> None:
    p = np.array([0.5, 0.05, 0.3, 0.15])
    d = sparsify(p, top_p=0.8)
    assert d.ids.tolist() == [0, 2]
    assert d.dense() == pytest.approx([0.5 / 0.8, 0, 0.3 / 0.8, 0], abs=1e-3)
    assert sparsify(p, top_p=0.81).ids.tolist() == [0, 2, 3]
    assert sparsify(p, top_p=1.0, max_ids=2).ids.tolist() == [0, 2]


def test_ids_beyond_65535_survive_the_round_trip() -> None:
    p = np.zeros(QWEN_VOCAB)
    p[[151_000, 70_000, 3]] = [0.6, 0.3, 0.1]
    d = decode(encode(sparsify(p, top_p=1.0)), QWEN_VOCAB)
    assert d.ids.tolist() == [151_000, 70_000, 3]
    assert d.dense()[151_000] == pytest.approx(0.6, abs=1e-3)


def test_what_arrives_is_what_the_sender_computes_with() -> None:
    d = sparsify(_peaked(QWEN_VOCAB), top_p=0.95)
    back = decode(encode(d), QWEN_VOCAB)
    assert np.array_equal(back.dense(), d.dense())
    assert len(encode(d)) == 6 * d.ids.size < 2_000


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00" * 7,
        np.array([5], "<u4").tobytes() + np.array([1.0], "<f2").tobytes(),  # id outside a vocab of 5
        np.array([1, 1], "<u4").tobytes() + np.array([0.5, 0.5], "<f2").tobytes(),  # twice
        np.array([1], "<u4").tobytes() + np.array([np.nan], "<f2").tobytes(),
        np.array([1], "<u4").tobytes() + np.array([-1.0], "<f2").tobytes(),
        np.array([1], "<u4").tobytes() + np.array([0.0], "<f2").tobytes(),
    ],
)
def test_malformed_bytes_are_refused(data: bytes) -> None:
    with pytest.raises(TransportError):
        decode(data, 5)


def test_too_many_ids_are_refused_before_they_are_read() -> None:
    d = sparsify(np.full(5000, 1 / 5000), top_p=1.0, max_ids=5000)
    with pytest.raises(TransportError, match="more than"):
        decode(encode(d), 5000, max_ids=4096)


def test_bad_settings_say_so() -> None:
    with pytest.raises(ConfigError):
        sparsify(np.ones(3) / 3, top_p=0)
