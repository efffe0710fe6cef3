"""A target's cost curve that knows how old each of its points is (``CostCurve``), and
how the engines read a curve between its measured sizes."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

__all__ = ["CostCurve", "priced", "within_measured"]

FLOOR_OF = 5  # the latest measurements of a point whose least is its floor (``floors``)


class CostCurve(dict[int, float]):
    """A target's cost curve, n -> seconds of one forward over n tokens (a moving average),
    that also knows how many forwards, of any size, were measured since each n was.

    A point nobody measures again goes stale, and a stale point can hold itself in place:
    plain decoding's point measured while another process took the cores made every
    round's draft look free, so every round drafted and that point was never measured
    again (a batch of 4 drafted in 484 rounds of 485 at twice plain's cost per token,
    ``docs/bench/collective``). So the policies decode plainly once when that point is
    ``refresh`` forwards old (``stale``), and a measurement of a stale point replaces it.

    A choice that measures one side seldom needs each point's ``floors`` instead: on a
    shared machine a forward is only ever slowed (another process, the host), so the least
    of a point's latest measurements is its cost, where one slow forward moves the moving
    average for many forwards. Plain decoding at batch 4 split 86 of 127 rounds into two
    forwards, 1+3 or 2+2, that cost 19-27% more than one over all 4 tokens: a slow forward
    over 4 can raise that point's average above the halves', and the whole is measured
    again only every 32 split rounds (``decoding.split.split_forward``).
    Floors ``within`` the latest forwards compare like with like: with the floor fix plain
    decoding still split a third of its rounds in two categories (2 + 2, 41% dearer than
    one forward over 4 in the same run's prices), since the halves, measured seldom, kept
    floors from a fast minute while the whole's followed the machine's slow one. So the
    floors now only propose a split, and paired measurements decide (``decoding.split``).
    A batch's draft lengths are priced by the points measured within the latest forwards
    (``fresh``; ``AdaptiveDraftLength.trim_together``), so a size measured dear once is
    tried again.
    """

    def __init__(self, points: Mapping[int, float] | None = None) -> None:
        super().__init__(points or {})
        self.forwards = 0  # forwards measured, every size
        # n -> its latest ``FLOOR_OF`` measurements, each as (``forwards`` then, seconds)
        self._latest: dict[int, deque[tuple[int, float]]] = {}

    def record(self, n: int, seconds: float, smoothing: float, refresh: int) -> None:
        """A forward over ``n`` tokens took ``seconds``."""
        old = None if self.stale(n, refresh) else self.get(n)
        self[n] = seconds if old is None else (1 - smoothing) * old + smoothing * seconds
        self.forwards += 1
        self._latest.setdefault(n, deque(maxlen=FLOOR_OF)).append((self.forwards, seconds))

    def floors(self, within: int | None = None) -> dict[int, float]:
        """Each point's least latest measurement (its value where it was set, not measured);
        with ``within``, of those among the latest ``within`` forwards, a point measured only
        before them left out."""
        since = 0 if within is None else self.forwards - within
        out = {}
        for n, v in self.items():
            latest = self._latest.get(n)
            if not latest:
                out[n] = v
            elif recent := [seconds for at, seconds in latest if at > since]:
                out[n] = min(recent)
        return out

    def fresh(self, within: int) -> dict[int, float]:
        """The points measured among the latest ``within`` forwards (their moving averages),
        and those set, not measured."""
        since = self.forwards - within
        return {n: v for n, v in self.items() if not self._latest.get(n) or self._latest[n][-1][0] > since}

    def stale(self, n: int, refresh: int) -> bool:
        """Whether the point n is measured, but more than ``refresh`` forwards ago."""
        latest = self._latest.get(n)
        return n in self and self.forwards - (latest[-1][0] if latest else 0) > refresh


def within_measured(curve: Mapping[int, float], n: int) -> float | None:
    """A measured cost curve at ``n``: its value there, linear between the nearest measured
    sizes around ``n``, or None outside the measured range (each caller extrapolates)."""
    if n in curve:
        return curve[n]
    below = [m for m in curve if m < n]
    above = [m for m in curve if m > n]
    if not below or not above:
        return None
    lo, hi = max(below), min(above)
    w = (n - lo) / (hi - lo)
    return (1 - w) * curve[lo] + w * curve[hi]


def priced(curve: Mapping[int, float], n: int) -> float:
    """Seconds of a forward over ``n`` tokens by a measured ``curve`` (not empty): its
    value, linear between measured sizes, no cheaper than the smallest below them, and past
    the largest at half that size's average cost per token: CPU curves flatten past kernel
    tile sizes, so the local slope overstates; an optimistic guess, never free."""
    inside = within_measured(curve, n)
    if inside is not None:
        return inside
    if n < min(curve):
        return curve[min(curve)]
    top = max(curve)
    return curve[top] * (1 + 0.5 * (n - top) / top)
