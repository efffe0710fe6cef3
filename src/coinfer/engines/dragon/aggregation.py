"""Output aggregation (paper 003, §2.2 and §4): the next-token distribution of retrieval-
augmented generation as a mixture over documents, and Speculative Aggregation.

Each side s (device, cloud) decodes every one of its documents d with the context and
mixes the results, ``p^s = sum_d softmax(R)_d p(x | d, x_<t)`` (REPLUG), and keeps
``log h^s = logsumexp_d R(d, x_<t)`` (App. A.1). The two sides' mixtures are one mixture
over all documents, ``p = eta^l p^l + eta^r p^r`` with ``eta = softmax(log h^l, log h^r)``
(Eq. 4), without either side seeing the other's documents.

Speculative Aggregation (Algorithm 1) samples ``p`` from the two sides' draft tokens,
each drawn from its own side's ``p^s``: side a's draft x is kept with probability
``min(1, p(x) / p^a(x))``, else replaced by a draw from ``norm(max(0, p^b - p^a))``; one
of the two results is taken with probability 1/2, and each draft is accepted iff it equals
that token. A rejection then has probability ``eta^b (1 - p^b(x) / p^a(x))``: the *other*
side's weight. Appendix A.2's proof has exactly this; §4.2 and Algorithm 1 print
``eta^a`` there, which would not give the mixture (``test_aggregation`` checks ours by
chi-square). Greedy decoding takes the mixture's most likely token instead, and each side
drafts its own most likely token.

Every uniform comes from the position and the seed (``sampling.PositionDraws``), so the
text does not depend on which side aggregates or on how the drafts were timed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coinfer.decoding.sampling import sample_at
from coinfer.errors import ConfigError

__all__ = [
    "Aggregated",
    "Uniforms",
    "greedy_aggregate",
    "local_mixture",
    "mixture",
    "side_weight",
    "speculative_aggregate",
]


def local_mixture(doc_probs: np.ndarray, relevance: np.ndarray) -> tuple[np.ndarray, float]:
    """Eq. 2 on one side: (p^s (vocab,), log h^s) from the per-document next-token
    distributions ``doc_probs`` (n_docs, vocab) and the documents' relevance scores
    ``relevance`` (n_docs,), the mixture weights being their softmax."""
    r = np.asarray(relevance, dtype=np.float64)
    if doc_probs.ndim != 2 or doc_probs.shape[0] != r.size or r.size == 0:
        raise ConfigError(f"need one relevance score per document, got {r.size} for {doc_probs.shape[0]}")
    top = float(r.max())
    w = np.exp(r - top)
    log_h = top + float(np.log(w.sum()))
    p = (w / w.sum()) @ np.asarray(doc_probs, dtype=np.float64)
    return p / p.sum(), log_h


def side_weight(log_h: float, other_log_h: float) -> float:
    """eta of the side with ``log_h`` (App. A.1's log-softmax over the two sides)."""
    return float(1.0 / (1.0 + np.exp(other_log_h - log_h)))


def mixture(p_a: np.ndarray, p_b: np.ndarray, eta_a: float) -> np.ndarray:
    """Eq. 4: ``eta_a p_a + (1 - eta_a) p_b``."""
    return eta_a * p_a + (1.0 - eta_a) * p_b


@dataclass(frozen=True)
class Uniforms:
    """The five draws one aggregation uses: per side, one to reject and one to resample,
    then one to choose between the two sides' results."""

    reject_a: float
    resample_a: float
    reject_b: float
    resample_b: float
    choose: float

    @classmethod
    def at(cls, seed: int, position: int) -> Uniforms:
        """The draws for ``position`` of a text seeded with ``seed``."""
        return cls(*(float(u) for u in np.random.default_rng([seed, position, 3]).random(5)))


@dataclass(frozen=True)
class Aggregated:
    """The target token and whether each side's draft was it."""

    token: int
    accepted_a: bool
    accepted_b: bool


def _sample(x: int, p_a: np.ndarray, p_b: np.ndarray, eta_b: float, reject: float, resample: float) -> int:
    """Algorithm 1's ``Sample``: side a's draft x, kept or replaced so that the result is a
    sample of ``(1 - eta_b) p_a + eta_b p_b``."""
    if p_a[x] > p_b[x] and reject < eta_b * (1.0 - p_b[x] / p_a[x]):
        residual = np.maximum(0.0, p_b - p_a)
        return sample_at(residual / residual.sum(), resample)
    return x


def speculative_aggregate(
    x_a: int, p_a: np.ndarray, x_b: int, p_b: np.ndarray, eta_a: float, u: Uniforms
) -> Aggregated:
    """Algorithm 1: the target token (a sample of ``mixture(p_a, p_b, eta_a)`` when x_a ~ p_a
    and x_b ~ p_b) and each draft's acceptance."""
    eta_b = 1.0 - eta_a
    from_a = _sample(x_a, p_a, p_b, eta_b, u.reject_a, u.resample_a)
    from_b = _sample(x_b, p_b, p_a, eta_a, u.reject_b, u.resample_b)
    token = from_a if u.choose <= 0.5 else from_b
    return Aggregated(token, x_a == token, x_b == token)


def greedy_aggregate(x_a: int, p_a: np.ndarray, x_b: int, p_b: np.ndarray, eta_a: float) -> Aggregated:
    """Greedy: the mixture's most likely token (the lower id on a tie)."""
    token = int(np.argmax(mixture(p_a, p_b, eta_a)))
    return Aggregated(token, x_a == token, x_b == token)
