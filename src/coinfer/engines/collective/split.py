"""Whether a batched verification runs as two forwards: the measured cost curve proposes a
cut (``rounds.split_forward``), and paired measurements of the same shape decide.

A curve's points are measured at different minutes, and on a shared machine a minute can
be slow. Compared point against point, a split's halves measured in a fast minute looked
cheaper than the whole measured in a slow one, and the split then held itself in place,
since the side it runs is the side measured again (``docs/bench/collective``: plain
decoding split its own batches of 4 into 2 + 2, 21% dearer than one forward, 25 to 102
times a run). So a split runs only where forwards of the same shape, split and whole,
measured a few verifications apart, say it pays: the ratio of such a pair is free of the
machine's minute. Proposed splits of a shape without enough pairs are probed, split and
whole in turn; a shape that pays is still run whole once every ``SPLIT_PROBE`` splits,
and one that does not is probed again once every ``SPLIT_PROBE`` proposals.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import median

__all__ = ["PAIR_GAP", "SPLIT_PROBE", "SplitJudge"]

SPLIT_PROBE = 32  # splits between whole probes of a paying shape; proposals between probes of the rest
PAIR_GAP = 4  # a split and a whole forward of one shape at most this many verifications apart make a pair
PAIRS = 3  # a shape's latest pairs, whose median ratio decides
ENOUGH = 3  # pairs a shape needs before its verdict holds: one odd pair is outvoted


@dataclass
class _Shape:
    """One shape's paired record: split over whole seconds, and its unpaired latest
    measurements, each as (verification, seconds)."""

    ratios: deque[float] = field(default_factory=lambda: deque(maxlen=PAIRS))
    split: tuple[int, float] | None = None
    whole: tuple[int, float] | None = None
    since: int = 0  # proposals (paying: splits) since the latest pair


class SplitJudge:
    """Paired measurements per shape, (rows, tokens), and the choice they make."""

    def __init__(self, margin: float = 0.03) -> None:
        self.margin = margin  # what a split must save, as a share of the whole
        self.verified = 0  # verifications seen (``choose`` calls)
        self._shapes: dict[tuple[int, int], _Shape] = {}

    def choose(self, shape: tuple[int, int], proposed: bool) -> bool:
        """Whether to split this verification, of ``shape``, which the curve proposes to cut
        (``proposed``) or not; one call per verification."""
        self.verified += 1
        if not proposed:
            return False
        s = self._shapes.setdefault(shape, _Shape())
        s.since += 1
        if self.pays(shape):
            return s.since % SPLIT_PROBE != 0  # a whole now and then, paired with the latest split
        if self._fresh(s.split):
            return False  # a probe's split waits for its whole
        return len(s.ratios) < ENOUGH or s.since >= SPLIT_PROBE  # probe, or probe again

    def measured(self, shape: tuple[int, int], split: bool, seconds: float) -> None:
        """The verification just chosen ran ``split`` or whole and took ``seconds``."""
        s = self._shapes.setdefault(shape, _Shape())
        mine = (self.verified, seconds)
        other = s.whole if split else s.split
        if self._fresh(other):
            assert other is not None
            s.ratios.append(seconds / other[1] if split else other[1] / seconds)
            s.split = s.whole = None
            s.since = 0
        elif split:
            s.split = mine
        else:
            s.whole = mine

    def pays(self, shape: tuple[int, int]) -> bool:
        """Whether the shape's pairs say its split saves the margin."""
        s = self._shapes.get(shape)
        return s is not None and len(s.ratios) >= ENOUGH and median(s.ratios) < 1.0 - self.margin

    def _fresh(self, at: tuple[int, float] | None) -> bool:
        return at is not None and self.verified - at[0] <= PAIR_GAP
