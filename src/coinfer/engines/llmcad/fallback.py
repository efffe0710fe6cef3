"""The self-adaptive fallback strategy (§3.3): when the target verifies.

After every token the memory-resident model adds, the tree-cumulative confidence
``T_c = max_i C_i`` (the most confident branch's cumulative confidence) is compared with
the threshold alpha; below it, the target verifies. After each verification alpha
follows Eq. 3 from the most matching branch: halved when all its ``N_all`` tokens were
correct, else set to its error rate ``(N_all - N_correct) / N_all``, so a draft that has
been right is trusted for longer trees and one that has just been wrong is checked soon.

Eq. 3 knows nothing of what a verification costs, and after an error it can ask for
one almost at once (a branch of 48 tokens with only its first right sets alpha to
0.98). Where a verification costs as much as 70 draft tokens (a target read from
storage), a pass over a four-token tree is wasted. So the fallback also waits while the
next draft token still pays for itself (``VerifyCost``): the most confident branch's next token is kept with
about probability T_c and costs one draft forward, while the round so far makes
``(1 + E) / (c_v + n c_d)`` tokens per second (E: the tokens the tree is expected to
keep, the sum of its nodes' cumulative confidences; n: its size; c_d, c_v: the measured
seconds per draft token and per verification). Drafting on pays while
``T_c > rate * c_d``, so the target verifies when T_c is below both alpha and that.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["AdaptiveThreshold", "VerifyCost", "next_alpha", "tree_confidence"]

_SMALLEST_ALPHA = 1e-30  # halving stops here; the tree-size cap decides long before


def tree_confidence(branch_confidences: Sequence[float]) -> float:
    """T_c: the largest cumulative confidence of any branch (1.0 for an empty tree)."""
    return max(branch_confidences, default=1.0)


def next_alpha(alpha: float, n_correct: int, n_all: int) -> float:
    """Eq. 3: alpha after a verification that found ``n_correct`` of the most matching
    branch's ``n_all`` tokens correct (a tree with no tokens leaves it as it was)."""
    if n_all <= 0:
        return alpha
    if n_correct >= n_all:
        return max(alpha * 0.5, _SMALLEST_ALPHA)
    return (n_all - n_correct) / n_all


class VerifyCost:
    """Seconds per draft token and per verification (moving averages over the rounds),
    and the confidence below which drafting on no longer pays."""

    def __init__(self, weight: float = 0.5) -> None:
        self.weight = weight
        self.draft_s: float | None = None  # per tree token
        self.verify_s: float | None = None

    def observe(self, drafted: int, draft_s: float, verify_s: float) -> None:
        if drafted > 0:
            self.draft_s = self._mix(self.draft_s, draft_s / drafted)
        self.verify_s = self._mix(self.verify_s, verify_s)

    def _mix(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.weight) * old + self.weight * new

    def floor(self, expected: float, size: int) -> float:
        """``rate * c_d`` for a tree of ``size`` tokens expected to keep ``expected``: the
        confidence a next token needs to pay for itself (1.0, no floor, before any round
        was measured)."""
        if self.draft_s is None or self.verify_s is None:
            return 1.0
        return (1 + expected) * self.draft_s / (self.verify_s + size * self.draft_s)


class AdaptiveThreshold:
    """Alpha through a request, and its history (the first value, then one per update)."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.history = [alpha]

    def due(self, branch_confidences: Sequence[float], floor: float = 1.0) -> bool:
        """Whether the tree should be verified now: T_c below alpha and below ``floor``
        (``VerifyCost.floor``)."""
        return tree_confidence(branch_confidences) < min(self.alpha, floor)

    def update(self, n_correct: int, n_all: int) -> None:
        self.alpha = next_alpha(self.alpha, n_correct, n_all)
        self.history.append(self.alpha)
