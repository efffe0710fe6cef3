"""The self-adaptive fallback strategy (§3.3): when the target verifies.

After every token the memory-resident model adds, the tree-cumulative confidence
``T_c = max_i C_i`` (the most confident branch's cumulative confidence) is compared with
the threshold alpha; below it, the target verifies. After each verification alpha
follows Eq. 3 from the most matching branch: halved when all its ``N_all`` tokens were
correct, else set to its error rate ``(N_all - N_correct) / N_all``, so a draft that has
been right is trusted for longer trees and one that has just been wrong is checked soon.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["AdaptiveThreshold", "next_alpha", "tree_confidence"]

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


class AdaptiveThreshold:
    """Alpha through a request, and its history (the first value, then one per update)."""

    def __init__(self, alpha: float) -> None:
        self.alpha = alpha
        self.history = [alpha]

    def due(self, branch_confidences: Sequence[float]) -> bool:
        """Whether the tree should be verified now: T_c < alpha."""
        return tree_confidence(branch_confidences) < self.alpha

    def update(self, n_correct: int, n_all: int) -> None:
        self.alpha = next_alpha(self.alpha, n_correct, n_all)
        self.history.append(self.alpha)
