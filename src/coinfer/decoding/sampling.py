"""Next-token distributions and seeded sampling, shared by every engine.

``probs_from_logits`` applies temperature, top-k and top-p (nucleus) to one row of
logits; temperature 0 means greedy and gives a one-hot distribution, so lossless
verification treats greedy and sampled decoding alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from coinfer.errors import ConfigError

__all__ = ["PositionDraws", "SamplingParams", "probs_from_logits", "sample", "sample_at"]


@dataclass(frozen=True)
class SamplingParams:
    """How to turn logits into a token. ``temperature == 0`` is greedy."""

    temperature: float = 0.0
    top_k: int = 0  # 0: no top-k cut
    top_p: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError(
                f"temperature must be a finite number >= 0, got {self.temperature}",
                hint="pass --temperature 0 for greedy decoding, or a positive number to sample",
            )
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0, got {self.top_k}", hint="pass --top-k 0 (off) or a count")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(
                f"top_p must be in (0, 1], got {self.top_p}", hint="pass --top-p 1 (off) or less"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SamplingParams:
        """From ``dataclasses.asdict`` of one (received as JSON), validated as if given here."""
        if not isinstance(obj, dict):
            raise ConfigError(f"sampling parameters must be an object, got {type(obj).__name__}")
        seed = obj.get("seed")
        try:
            return cls(
                temperature=float(obj.get("temperature", 0.0)),
                top_k=int(obj.get("top_k", 0)),
                top_p=float(obj.get("top_p", 1.0)),
                seed=None if seed is None else int(seed),
            )
        except (TypeError, ValueError, OverflowError) as exc:
            raise ConfigError(f"sampling parameters {str(obj)[:80]} are not numbers: {exc}") from None


def probs_from_logits(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Distribution (vocab,) float64 from logits (vocab,): temperature, then top-k, then top-p."""
    if params.greedy:  # float64 holds every float32 exactly: the same argmax
        out = np.zeros(np.shape(logits), dtype=np.float64)
        out[int(np.argmax(logits))] = 1.0
        return out
    # In place in one copy of the row: a fresh vocabulary-sized temporary costs page faults,
    # several times what its arithmetic does (the same operations, so the same bits).
    x = np.array(logits, dtype=np.float64)
    x /= params.temperature
    support = None
    if 0 < params.top_k < x.size:
        p, support = _top_k(x, params.top_k)
    else:
        x -= np.max(x)
        p = np.exp(x, out=x)
    p /= p.sum()
    if params.top_p < 1.0:
        p = _nucleus(p, params.top_p, support)
    return p


def _top_k(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Unnormalised probabilities of the ``k`` largest logits (and any tied with the k-th),
    zero elsewhere, the exponential taken over those alone; and their ids."""
    kth = np.partition(x, -k)[-k]
    kept = np.flatnonzero(~(x < kth))
    p = np.zeros_like(x)
    p[kept] = np.exp(x[kept] - np.max(x[kept]))
    return p, kept


def _nucleus(p: np.ndarray, top_p: float, support: np.ndarray | None = None) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``; renormalise.
    ``support``: the only tokens with any mass, where known (after top-k)."""
    if support is None:
        keep = _most_likely(p, top_p)
    else:
        order, k = _head(p, support, top_p)
        keep = order[: k + 1]
    out = np.zeros_like(p)
    out[keep] = p[keep]
    return out / out.sum()


_NEAR_TOP = 1e-4  # the first candidates: at least this share of the top probability
_FEW = 4096  # more candidates than this are cut by partition, not sorted whole


def _most_likely(p: np.ndarray, top_p: float) -> np.ndarray:
    """The most likely tokens in a stable sort's order (falling probability, ties by id), up
    to the first whose cumulative mass reaches ``top_p`` (every one with any mass where none
    does).
    Sorted in part: the candidates are every token at least as likely as the m-th most
    likely, m growing until their mass reaches ``top_p``. Those are a prefix of the whole
    sort, ties included, so the result is the whole sort's, at a fraction of its cost
    (a stable sort of a 150k vocabulary takes tens of milliseconds). A model's distribution
    is peaked, so the first candidates are every token within ``_NEAR_TOP`` of the most
    likely's probability: one comparison over the vocabulary, not a partition (which took
    1 ms a row, most of a sampled speculative step's Python)."""
    near = np.flatnonzero(p >= p.max() * _NEAR_TOP)
    if near.size <= _FEW:
        order, k = _head(p, near, top_p)
        if k < order.size:
            return order[: k + 1]
    m = 64
    while True:
        v = np.partition(p, p.size - m)[p.size - m] if m < p.size else 0.0  # the m-th largest
        candidates = np.flatnonzero(p >= v) if v > 0 else np.flatnonzero(p)
        order, k = _head(p, candidates, top_p)
        if k < order.size or v == 0:  # every token left out has no mass: nothing to keep of it
            return order[: k + 1]
        m *= 4


def _head(p: np.ndarray, candidates: np.ndarray, top_p: float) -> tuple[np.ndarray, int]:
    """``candidates`` in a stable sort's order by falling probability, and the index of the
    first whose cumulative mass reaches ``top_p`` (their count where none does)."""
    order = candidates[np.argsort(-p[candidates], kind="stable")]
    return order, int(np.searchsorted(np.cumsum(p[order]), top_p))


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from ``probs`` (vocab,)."""
    return sample_at(probs, float(rng.random()))


def sample_at(probs: np.ndarray, u: float) -> int:
    """The token whose share of the cumulative distribution ``probs`` holds ``u`` in [0, 1)."""
    if probs.max() == 1.0:
        return int(np.argmax(probs))
    glance = probs[::97]  # which way is faster (both give the same token)
    if 2 * np.count_nonzero(glance) > glance.size:
        return _dense_at(probs, u)
    # a cut distribution (top-k, top-p, a residual): its zeros add nothing to the running
    # sums, so the sums over its support are the whole cumulative sum's, where it rises
    support = np.flatnonzero(probs)
    if not support.size:  # no mass anywhere: the last token, as the whole sum gives
        return probs.size - 1
    cdf = np.cumsum(probs[support])
    j = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return int(support[j]) if j < support.size else probs.size - 1


_BLOCK = 4096  # tokens per block of a dense distribution's running sum (``_dense_at``)


def _dense_at(probs: np.ndarray, u: float) -> int:
    """``sample_at`` of a distribution with mass nearly everywhere: the running sum of each
    block of ``_BLOCK`` tokens' totals, then, within the block that holds ``u``, of its
    tokens. A running sum over the whole vocabulary took 0.42 ms a row (151,936 tokens),
    the sums per block 0.02, and a sampled speculative step draws at every row it verifies:
    its Python went from 13.3 to 7.5 ms (``docs/bench/serve/one-off/sampled_cdf.txt``). The
    token is the whole running sum's, except where ``u`` falls within rounding of a
    boundary between two tokens."""
    starts = np.arange(0, probs.size, _BLOCK)
    before = np.cumsum(np.add.reduceat(probs, starts))
    target = u * before[-1]
    b = min(int(np.searchsorted(before, target, side="right")), starts.size - 1)
    offset = float(before[b - 1]) if b else 0.0
    for block in range(b, starts.size):  # rounding may put ``target`` past this block's own sum
        cdf = offset + np.cumsum(probs[starts[block] : starts[block] + _BLOCK])
        j = int(np.searchsorted(cdf, target, side="right"))
        if j < cdf.size:
            return int(starts[block]) + j
        offset = float(cdf[-1])
    return probs.size - 1


class PositionDraws:
    """One uniform draw per position of the text, made from the seed and the position alone.

    A token sampled at position ``i`` with ``sample_at(p, draws.uniform(i))`` then depends
    only on its distribution, never on how many draws came before: speculative decoding
    (whose draft lengths follow measured timing) gives the same seeded text as plain
    decoding. With no seed, a random one is drawn once.
    """

    def __init__(self, seed: int | None) -> None:
        self.seed = (
            seed if seed is not None else int(np.random.SeedSequence().generate_state(1, np.uint64)[0] >> 1)
        )

    def uniform(self, position: int) -> float:
        return float(np.random.default_rng([self.seed, position]).random())
