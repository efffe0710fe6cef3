"""Next-token distributions as they travel: the top-p head, fp16 values, uint32 token ids.

Paper 003 (§7.1) sends only the most likely tokens holding ``p`` of the mass (0.8 there),
values as fp16, which cuts a distribution over Qwen's 151,936 tokens to a few hundred
bytes. Its reference code packs the ids as 8- or 16-bit integers, which cannot name most
of Qwen's vocabulary; ids here are uint32 (any vocabulary).

The sender must use what the receiver will see: ``sparsify`` returns the head already
renormalised and rounded to fp16, and a side drafts from ``densify`` of it, so both ends
of a link compute with one and the same distribution (which Speculative Aggregation
needs to be exact). ``decode`` checks everything it reads (sizes, ids inside the
vocabulary, finite non-negative values) and raises ``TransportError`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coinfer.errors import ConfigError, TransportError

__all__ = ["SparseDistribution", "decode", "encode", "sparsify"]

_IDS = np.dtype("<u4")
_VALUES = np.dtype("<f2")


@dataclass(frozen=True, eq=False)
class SparseDistribution:
    """Token ids (uint32, most likely first) and their probabilities (fp16, summing to
    about 1) over a vocabulary of ``vocab_size`` tokens."""

    ids: np.ndarray
    probs: np.ndarray
    vocab_size: int

    def dense(self) -> np.ndarray:
        """The distribution over the whole vocabulary (float64, sums to 1)."""
        out = np.zeros(self.vocab_size, dtype=np.float64)
        out[self.ids] = self.probs.astype(np.float64)
        return out / out.sum()


def sparsify(p: np.ndarray, top_p: float = 0.95, max_ids: int = 256) -> SparseDistribution:
    """The smallest head of most likely tokens holding ``top_p`` of ``p``'s mass (at most
    ``max_ids`` of them), renormalised, as fp16."""
    if not 0.0 < top_p <= 1.0 or max_ids < 1:
        raise ConfigError(f"need 0 < top_p <= 1 and max_ids >= 1, got {top_p}, {max_ids}")
    p = np.asarray(p, dtype=np.float64)
    n = min(max_ids, p.size)
    head = np.argpartition(-p, n - 1)[:n] if n < p.size else np.arange(p.size)
    head = head[np.argsort(-p[head], kind="stable")]
    cum = np.cumsum(p[head])
    keep = head[: min(n, int(np.searchsorted(cum, top_p * cum[-1])) + 1)]
    values = p[keep] / p[keep].sum()
    probs = values.astype(np.float16)
    nonzero = probs > 0
    if not nonzero.any():  # everything underflowed fp16: keep the most likely token alone
        nonzero[0], probs[0] = True, np.float16(1.0)
    return SparseDistribution(keep[nonzero].astype(np.uint32), probs[nonzero], int(p.size))


def encode(d: SparseDistribution) -> bytes:
    """The ids (uint32, little-endian) then the values (fp16, little-endian)."""
    return d.ids.astype(_IDS).tobytes() + d.probs.astype(_VALUES).tobytes()


def decode(data: bytes, vocab_size: int, *, max_ids: int = 4096) -> SparseDistribution:
    """What ``encode`` wrote, checked: ``TransportError`` for anything malformed."""
    if len(data) % 6 or not data:
        raise TransportError(f"a distribution of {len(data)} bytes is not n uint32 ids and n fp16 values")
    n = len(data) // 6
    if n > max_ids:
        raise TransportError(f"a distribution of {n} tokens is more than the {max_ids} allowed")
    ids = np.frombuffer(data[: 4 * n], dtype=_IDS).astype(np.uint32)
    probs = np.frombuffer(data[4 * n :], dtype=_VALUES).astype(np.float16)
    if int(ids.max()) >= vocab_size or np.unique(ids).size != n:
        raise TransportError(f"a distribution names token ids outside a vocabulary of {vocab_size}, or twice")
    if not np.all(np.isfinite(probs)) or np.any(probs < 0) or float(probs.astype(np.float64).sum()) <= 0:
        raise TransportError("a distribution holds values that are not finite non-negative probabilities")
    return SparseDistribution(ids, probs, vocab_size)
