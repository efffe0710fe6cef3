"""The confidence-based branch pacer (§3.2, Eq. 1-2): which branch of the token tree the
memory-resident model lengthens next.

A branch's cumulative confidence C_x (the product of its tokens' draft probabilities)
stands for how likely it is to be the target's text, and so for the share of the tree's
M tokens it deserves. Eq. 1 is how far branch x is below that share,
``f(x) = M * C_x / sum(C) - T_x`` (T_x: its length); max-min fairness (Eq. 2) keeps the
smallest ``f`` as large as it can, which each step does by giving the next token to the
branch furthest below its share.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["fair_share_gaps", "pick_branch"]


def fair_share_gaps(confidences: Sequence[float], lengths: Sequence[int], total: int) -> list[float]:
    """Eq. 1 for every branch: ``total * C_x / sum(C) - T_x``."""
    mass = sum(confidences)
    if mass <= 0:
        return [-float(t) for t in lengths]
    return [total * c / mass - t for c, t in zip(confidences, lengths, strict=True)]


def pick_branch(
    confidences: Sequence[float], lengths: Sequence[int], total: int, growable: Sequence[bool]
) -> int | None:
    """Eq. 2: the growable branch furthest below its share (the more confident on a tie),
    or None when no branch can grow."""
    gaps = fair_share_gaps(confidences, lengths, total)
    candidates = [i for i, ok in enumerate(growable) if ok]
    if not candidates:
        return None
    return max(candidates, key=lambda i: (gaps[i], confidences[i], -i))
