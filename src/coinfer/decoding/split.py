"""Whether a batched verification runs as two forwards: a cut is proposed, and paired
measurements of forwards over the same number of tokens decide.

A curve's points are measured at different minutes, and on a shared machine a minute can
be slow. Compared point against point, a split's halves measured in a fast minute looked
cheaper than the whole measured in a slow one, and the split then held itself in place,
since the side it runs is the side measured again (``docs/bench/collective``: plain
decoding split its own batches of 4 into 2 + 2, 21% dearer than one forward, 25 to 102
times a run). So a split runs only where forwards of the same tokens, split and whole,
measured a few verifications apart, say it pays: the ratio of such a pair is free of the
machine's minute. A size without enough pairs is probed, split once every
``PROBE_AFTER`` proposals and paired with the whole beside it, so that sizes seen once
(drafted batches come in many sizes) run whole; a size that pays is still run whole
once every ``SPLIT_PROBE`` splits, and one that does not is probed again once every
``SPLIT_PROBE`` proposals, or every ``PROBE_AFTER`` while one of its pairs says it pays:
a verdict turned by odd pairs is checked as soon as a new one would have been made.

A verdict stands on a size's latest ``PAIRS`` pairs and moves only when their median
leaves a band: a size starts paying once the median saves ``margin`` of the whole, and
stops once it saves nothing. On this CPU one pair's ratio scatters by about 0.07 around
what a split saves at batch 8 (0.85-0.97, ``docs/bench/collective``), so three pairs'
median crossed the margin on noise, and configurations run one after another on a target
ran its batches of 8 whole in one workload and split in the next (run Q: 68 whole of
about 130 for one configuration, 4 for plain decoding, on one category).

Two places propose a cut: the measured cost curve's floors (``split_forward``), and, for
a forward of ``PROBE_FROM`` tokens or more, its most even cut (``probe_cut``), since the
curve alone proposed too seldom to be judged within a run (batch 8 on this CPU: 8 rows in
one forward 290 ms, in two of 4 206, yet plain decoding left 127 of scratch's forwards
whole). A size is keyed by its tokens, not its sequences: llama.cpp picks its kernels by
a batch's token rows. What a judge learned stays with the target (``split_judge``), as
the gate's record does, so a later run on it starts from the verdicts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

from coinfer.decoding.cost_curve import CostCurve, within_measured
from coinfer.decoding.learned import Learned

__all__ = [
    "FLOOR_WINDOW",
    "PAIR_GAP",
    "PROBE_AFTER",
    "PROBE_FROM",
    "SPLIT_PROBE",
    "SplitJudge",
    "even_cut",
    "planned_cut",
    "probe_cut",
    "split_forward",
    "split_judge",
]

SPLIT_PROBE = 32  # splits between whole probes of a paying size; proposals between probes of the rest
PAIR_GAP = 4  # a split and a whole forward of one size at most this many verifications apart make a pair
PAIRS = 9  # a size's latest pairs, whose median ratio decides
ENOUGH = 3  # pairs a size needs before its verdict holds: one odd pair is outvoted
PROBE_AFTER = 4  # proposals of a size without a verdict before each probe: it recurs
PROBE_FROM = 8  # tokens from which a forward's even cut is probed, proposed by the curve or not
DEARER = 1.25  # an even cut whose halves the curve measures this much dearer is not probed
FLOOR_WINDOW = 4 * SPLIT_PROBE  # forwards whose measurements a cut compares (``CostCurve.floors``)


@dataclass
class _Size:
    """One size's paired record: split over whole seconds, and its unpaired latest
    measurements, each as (verification, seconds)."""

    ratios: deque[float] = field(default_factory=lambda: deque(maxlen=PAIRS))
    paying: bool = False  # the verdict, moved only by a pair (``SplitJudge._verdict``)
    split: tuple[int, float] | None = None
    whole: tuple[int, float] | None = None
    since: int = 0  # proposals (paying: splits) since the latest pair


class SplitJudge:
    """Paired measurements per size (a forward's tokens), and the choice they make."""

    def __init__(self, margin: float = 0.03) -> None:
        self.margin = margin  # what a split must save, as a share of the whole
        self.verified = 0  # verifications seen (``choose`` calls)
        self._sizes: dict[int, _Size] = {}

    def choose(self, tokens: int, proposed: bool) -> bool:
        """Whether to split this verification, over ``tokens``, which a cut is proposed for
        (``proposed``) or not; one call per verification."""
        self.verified += 1
        if not proposed:
            return False
        s = self._sizes.setdefault(tokens, _Size())
        s.since += 1
        if self.pays(tokens):
            return s.since % SPLIT_PROBE != 0  # a whole now and then, paired with the latest split
        if self._fresh(s.split):
            return False  # a probe's split waits for its whole
        # probe a size that recurs (one seen once would be split untried), again soon one
        # whose pairs disagree, and now and then one that does not pay
        return s.since >= (SPLIT_PROBE if self._settled(s) else PROBE_AFTER)

    def measured(self, tokens: int, split: bool, seconds: float) -> None:
        """The verification just chosen ran ``split`` or whole and took ``seconds``."""
        s = self._sizes.setdefault(tokens, _Size())
        mine = (self.verified, seconds)
        other = s.whole if split else s.split
        if self._fresh(other):
            assert other is not None
            s.ratios.append(seconds / other[1] if split else other[1] / seconds)
            s.paying = self._verdict(s)
            s.split = s.whole = None
            s.since = 0
        elif split:
            s.split = mine
        else:
            s.whole = mine

    def pairs(self) -> dict[str, list[float]]:
        """Per size (tokens, a JSON key) with pairs, its latest pairs' split over whole
        seconds, oldest first: what the verdicts stand on (``pays``), for the record."""
        return {str(n): [round(r, 3) for r in s.ratios] for n, s in sorted(self._sizes.items()) if s.ratios}

    def pays(self, tokens: int) -> bool:
        """Whether the size's pairs said its split saves the margin (``_verdict``)."""
        s = self._sizes.get(tokens)
        return s is not None and s.paying

    def _verdict(self, s: _Size) -> bool:
        """A size's verdict after a new pair. A size starts paying once its pairs' median
        saves the margin, and keeps paying until the median says a split saves nothing:
        the band between keeps the verdict from flipping on the noise of a few pairs."""
        if len(s.ratios) < ENOUGH:
            return False
        return median(s.ratios) < (1.0 if s.paying else 1.0 - self.margin)

    def _settled(self, s: _Size) -> bool:
        """Whether a size that does not pay has enough pairs and none of them says it does:
        else two odd pairs that turned a paying size's median would run it whole for
        ``SPLIT_PROBE`` proposals (the likely cause of run H's batches of 8 run whole where
        plain decoding split them, ``docs/bench/collective``)."""
        return len(s.ratios) >= ENOUGH and min(s.ratios) >= 1.0 - self.margin

    def _fresh(self, at: tuple[int, float] | None) -> bool:
        return at is not None and self.verified - at[0] <= PAIR_GAP


def planned_cut(sizes: Sequence[int], costs: CostCurve, judge: SplitJudge) -> int:
    """Where to cut a forward over items of ``sizes`` tokens into two forwards, or 0 for
    one, where ``judge`` says it pays (one call per forward; tell the judge what it cost,
    ``SplitJudge.measured``). The curve's floors over the latest ``FLOOR_WINDOW`` forwards
    propose a cut (``split_forward``; every ``SPLIT_PROBE`` forwards one whose halves are
    not measured within them), a forward of ``PROBE_FROM`` tokens or more its even cut
    otherwise (``probe_cut``), and a size whose split pays its even cut (the curve then
    holds the split's cost)."""
    tokens = sum(sizes)
    explore = judge.verified % SPLIT_PROBE == SPLIT_PROBE - 1
    floors = costs.floors(within=FLOOR_WINDOW)
    at = split_forward(sizes, floors, explore=explore) or probe_cut(sizes, floors)
    if not at and judge.pays(tokens):
        at = even_cut(sizes)
    return at if judge.choose(tokens, proposed=bool(at)) else 0


def split_forward(
    sizes: Sequence[int], costs: Mapping[int, float], margin: float = 0.03, *, explore: bool = False
) -> int:
    """Where to cut a batched forward's items (their token counts, ``sizes``) into two
    forwards, or 0 for one. On a CPU a forward's cost is not monotonic in its tokens: in
    llama.cpp a kernel that pays from 8 rows on some machines costs more than the rows it
    saves from 8 to about 15 on this one (``docs/bench/collective``), so two forwards of 4
    cost less than one of 8. Only measured costs decide: the whole forward's own, and its
    parts' within the measured range; the cut must save ``margin`` of the whole. With
    ``explore``, a whole forward that is measured but whose halves are not is cut in the
    middle (``even_cut``), to measure them."""
    n = sum(sizes)
    whole = costs.get(n)
    if whole is None or len(sizes) < 2:
        return 0
    best, at, head = whole * (1.0 - margin), 0, 0
    for i in range(1, len(sizes)):
        head += sizes[i - 1]
        first, second = within_measured(costs, head), within_measured(costs, n - head)
        if first is not None and second is not None and first + second < best:
            best, at = first + second, i
    if at or not explore:
        return at
    middle = even_cut(sizes)
    middle_head = sum(sizes[:middle])
    halves = within_measured(costs, middle_head), within_measured(costs, n - middle_head)
    return middle if None in halves else 0


def even_cut(sizes: Sequence[int]) -> int:
    """The index that cuts items of ``sizes`` tokens into two parts nearest in tokens (0
    for fewer than two items)."""
    n, head, best, best_head = sum(sizes), 0, 0, 0
    for i in range(1, len(sizes)):
        head += sizes[i - 1]
        if not best or abs(2 * head - n) < abs(2 * best_head - n):
            best, best_head = i, head
    return best


def probe_cut(sizes: Sequence[int], costs: Mapping[int, float]) -> int:
    """The even cut of a forward of ``PROBE_FROM`` tokens or more whose smaller part holds a
    third of them, for the judge to probe, unless the curve (``costs``) measures the
    whole and both parts and two forwards cost ``DEARER`` times one; else 0."""
    n = sum(sizes)
    if n < PROBE_FROM:
        return 0
    at = even_cut(sizes)
    head = sum(sizes[:at])
    if not at or 3 * min(head, n - head) < n:
        return 0
    whole, first, second = costs.get(n), within_measured(costs, head), within_measured(costs, n - head)
    if whole is not None and first is not None and second is not None and first + second > DEARER * whole:
        return 0
    return at


def split_judge(target: Any, pipeline: bool, learned: Learned) -> SplitJudge:
    """The judge of ``target``'s verifications, kept in ``learned`` (a session's): one for
    forwards on every core (the sequential engine, and the pipeline's sequential rounds),
    one for the pipeline's pipelined phases, which verify on fewer."""
    return learned.of(target, "split-judge/pipelined" if pipeline else "split-judge", SplitJudge)
