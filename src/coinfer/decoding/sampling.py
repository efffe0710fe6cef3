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
    x = np.asarray(logits, dtype=np.float64)
    if params.greedy:
        out = np.zeros_like(x)
        out[int(np.argmax(x))] = 1.0
        return out
    x = x / params.temperature
    if 0 < params.top_k < x.size:
        kth = np.partition(x, -params.top_k)[-params.top_k]
        x = np.where(x < kth, -np.inf, x)
    p = np.exp(x - np.max(x))
    p /= p.sum()
    if params.top_p < 1.0:
        p = _nucleus(p, params.top_p)
    return p


def _nucleus(p: np.ndarray, top_p: float) -> np.ndarray:
    """Keep the smallest set of most likely tokens whose mass reaches ``top_p``; renormalise."""
    order = np.argsort(-p, kind="stable")
    cum = np.cumsum(p[order])
    keep = order[: int(np.searchsorted(cum, top_p) + 1)]
    out = np.zeros_like(p)
    out[keep] = p[keep]
    return out / out.sum()


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from ``probs`` (vocab,)."""
    return sample_at(probs, float(rng.random()))


def sample_at(probs: np.ndarray, u: float) -> int:
    """The token whose share of the cumulative distribution ``probs`` holds ``u`` in [0, 1)."""
    if probs.max() == 1.0:
        return int(np.argmax(probs))
    cdf = np.cumsum(probs)
    return min(int(np.searchsorted(cdf, u * cdf[-1], side="right")), probs.size - 1)


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
