"""Speculative decoding inside a continuous batch: every request of the batch that drafts
gets its drafter's proposal after its own context, the proposals are cut together so that
the batch's one forward is worth what it costs, and each request keeps the longest prefix
of its draft that the target's own choices agree with.

The cut is ``DraftSizer.cut_together`` over the target's cost curve per forward (``n``
tokens, whatever its requests): a forward of ``b`` requests verifying ``t`` draft tokens
costs ``t(b + t)`` and yields ``b`` plus the drafts' expected kept tokens, and no request
is left below ``batch_floor`` of its plain-decoding rate. As the batch grows, a forward
over its plain tokens alone gets dearer and the drafts' share of what it yields smaller,
so speculation gives way to plain batched decoding by itself, never below it by more than
the floor. Where the backend runs a step as several passes (llama.cpp with a cache per
sequence: one per row count, ``SteerableModel.pass_rows``), the step is priced as its
passes, and evened where one pass of equal rows costs less (``batch_shape``); the curve
records each pass's share of a step's seconds, so it stays one forward's price. A
request that samples keeps what its own samples of the target agree with
(``chat.drafting``; ``accepted`` is given those samples as its choices).

The loop that owns the batch (``chat.LocalChat.step``) calls ``drafts`` before its
forward, ``accepted`` per request after it, and ``measured`` with the forward's size and
seconds; ``forget`` when a request leaves.

The cut is a prediction; ``DraftingGate`` checks it against what happened. Per batch
width (``width_bucket``) it measures the tokens per second of the steps that verified
drafts and of the steps that did not (kept plain by the gate, or whose drafts the cut
took away), and once drafting is measured slower at a width, steps of that width decode
plainly (a drafting step every ``probe_every`` keeps the comparison fresh): a batch never
stays below plain batched decoding because the cost curve or the acceptance was guessed
wrong. A step whose drafts were all cut away counts as plain: counted as drafting, a
stretch of text with nothing to copy measured "drafting" at plain's rate less a little,
and closed the gate before the next copy came.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from coinfer.decoding.batch_shape import Passes
from coinfer.decoding.draft_length import AdaptiveDraftLength, CostCurve, DraftSizer
from coinfer.decoding.drafters import Drafter

__all__ = [
    "BATCH_COPY_MISS",
    "BATCH_FLOOR",
    "EXACT_WIDTHS",
    "BatchSpeculator",
    "DraftingGate",
    "StepDrafts",
    "accepted_length",
    "width_bucket",
]

BATCH_FLOOR = 0.97  # each request keeps at least this share of its plain rate in a drafting forward
# ``copy_prior``'s miss in a batch's steps of two or more requests: the value that fits the
# n-gram drafter's copies; a step of one request keeps the lone request's cautious 1.0. Served
# runs with and without it: docs/bench/serve/README.md, 2026-12-03
BATCH_COPY_MISS = 0.8
EXACT_WIDTHS = 8  # batch widths up to this one each have their own drafting gate measurements


def accepted_length(draft: Sequence[int], choices: Sequence[int]) -> int:
    """How many leading draft tokens the target agrees with: ``choices[i]`` is its greedy
    token after the context and ``draft[:i]`` (so ``choices`` has one more entry than
    ``draft``, and ``choices[n]`` is the target's own next token after ``n`` kept)."""
    n = 0
    while n < len(draft) and int(choices[n]) == int(draft[n]):
        n += 1
    return n


def width_bucket(width: int) -> int:
    """Batch widths that share a gate's measurements: each width up to ``EXACT_WIDTHS`` its
    own, then 9-16, 17-32, ... Widths 3 and 4 once shared one: a plain step of 3 requests
    gives 3 tokens where one of 4 gives 4 for little more, so the bucket's plain rate sank
    with its share of width-3 steps and let drafting through where it lost: in process, 4
    requests at a time on an AVX2 machine, width-3 drafting steps (2-3 passes with a cache
    per conversation) gave 8.5 and 9.3 tokens/s in two runs of three where the same runs'
    width-3 plain steps gave 14.5 and 17.4 (``docs/bench/serve/one-off/gate_widths.txt``)."""
    return width if width <= EXACT_WIDTHS else 1 << (width - 1).bit_length()


@dataclass
class DraftingGate:
    """Whether a step of ``width`` requests may draft: per ``width_bucket``, the tokens
    per second of steps that verified drafts against those that did not. Each rate is the
    tokens over the seconds of the recent steps of its kind (sums decayed by ``decay`` a
    step), not an average of each step's own rate: a step that kept a long draft and one
    that kept nothing weigh by their seconds, as they do in the batch's throughput, and
    one unlucky step does not swing the gate (an average of per-step rates moved with the
    last few steps). Each kind is measured ``warmup`` times first (drafting first); then
    drafting is allowed where it measured at least as fast as plain, and elsewhere every
    ``probe_every``-th step, while plain steps go on being measured as they run."""

    warmup: int = 6
    probe_every: int = 8
    decay: float = 0.95
    _sums: dict[tuple[int, bool], tuple[float, float]] = field(default_factory=dict)
    _counts: dict[tuple[int, bool], int] = field(default_factory=dict)
    _skipped: dict[int, int] = field(default_factory=dict)

    def drafting(self, width: int) -> bool:
        b = width_bucket(width)
        if self._counts.get((b, True), 0) < self.warmup:
            return True
        if self._counts.get((b, False), 0) < self.warmup:
            return False
        if self._rate((b, True)) >= self._rate((b, False)):
            return True
        self._skipped[b] = self._skipped.get(b, 0) + 1
        return self._skipped[b] % self.probe_every == 0

    def observe(self, width: int, drafted: bool, tokens: int, seconds: float) -> None:
        """A step of ``width`` requests (that verified drafts, or not) gave ``tokens`` in ``seconds``."""
        if seconds <= 0:
            return
        key = (width_bucket(width), drafted)
        old_tokens, old_seconds = self._sums.get(key, (0.0, 0.0))
        self._sums[key] = (self.decay * old_tokens + tokens, self.decay * old_seconds + seconds)
        self._counts[key] = self._counts.get(key, 0) + 1

    def _rate(self, key: tuple[int, bool]) -> float:
        tokens, seconds = self._sums[key]
        return tokens / seconds

    def rates(self) -> dict[str, float]:
        """What it measured, for a report: ``"4:draft"`` -> tokens/s of width 4's drafting steps."""
        return {
            f"{b}:{'draft' if d else 'plain'}": round(self._rate((b, d)), 3) for b, d in sorted(self._sums)
        }


class StepDrafts(NamedTuple):
    """A step's drafts (``BatchSpeculator.drafts``): each drafting request's tokens to
    verify, in the order asked; the seconds drafting took; the tokens proposed before the
    cut; and ``width``, the rows every request of the step brings where the step is evened
    (``batch_shape.evened``: a drafting request's rows go on with more of its own
    proposal, and the loop fills the rest), else None."""

    drafts: list[list[int]]
    seconds: float
    proposed: int
    width: int | None = None


@dataclass
class BatchSpeculator:
    """One drafter for every request of a batch, sized by one policy over the target's
    cost curve (``costs``: shared by every batch on that target, ``speculative.target_costs``);
    with a ``gate``, steps draft only at the widths where drafting measured no slower."""

    drafter: Drafter
    sizer: DraftSizer
    gate: DraftingGate | None = None

    @classmethod
    def over(cls, drafter: Drafter, costs: CostCurve, *, batch_floor: float) -> BatchSpeculator:
        """The adaptive policy with the served batch's copy miss and a drafting gate.
        ``batch_floor`` has no default: the served speculative engine's is 0
        (``SpecConfig``), LLMCad's ``BATCH_FLOOR``, and an in-process study that took this
        method's old default of ``BATCH_FLOOR`` measured another cut than the server's
        (``docs/bench/serve/one-off/width4_drafts.txt``)."""
        policy = AdaptiveDraftLength(costs=costs, batch_floor=batch_floor, batch_copy_miss=BATCH_COPY_MISS)
        return cls(drafter, DraftSizer(policy), DraftingGate())

    def drafts(
        self, rows: Sequence[tuple[int, list[int], int]], others: int, passes: Passes | None = None
    ) -> StepDrafts:
        """Each row's draft, cut together: rows are (key, context, most tokens it may take);
        ``others``: the step's requests that do not draft; ``passes``: how the backend runs
        the step by the rows each request brings, these rows first, then the others (None:
        one forward, whatever its shape)."""
        k = self.sizer.next_k()
        if k <= 0 or not rows:
            return StepDrafts([[] for _ in rows], 0.0, 0)
        for key, context, _ in rows:
            self.sizer.learn(key, context)
        t0 = time.perf_counter()
        proposed = self.drafter.propose_many([(key, context) for key, context, _ in rows], k)
        seconds = time.perf_counter() - t0
        capped = [d.head(max(0, most)) for d, (_, _, most) in zip(proposed, rows, strict=True)]
        items = [(key, len(context), d) for (key, context, _), d in zip(rows, capped, strict=True)]
        cut = [list(d.tokens) for d in self.sizer.cut_together(items, others, passes)]
        width = None
        if passes is not None and any(cut):
            width = self.sizer.evened([1 + len(d) for d in cut] + [1] * others, passes)
        if width is not None:  # the rows the step runs anyway: as much of each proposal as fits
            cut = [list(d.tokens[: width - 1]) for d in capped]
        return StepDrafts(cut, seconds, sum(len(d.tokens) for d in proposed), width)

    def accepted(self, key: int, context: list[int], draft: list[int], choices: Sequence[int]) -> list[int]:
        """The tokens ``key`` keeps from this forward: its draft's agreed prefix, then the
        target's own next token (``choices``: the target's greedy tokens along the draft, or
        a sampling request's samples, as far as they agree); the drafter hears what the
        target produced."""
        n = accepted_length(draft, choices)
        kept = [*draft[:n], int(choices[n])]
        self.drafter.feedback(key, context, kept)
        return kept

    def measured(
        self, forward_tokens: int, seconds: float, *, draft_s: float = 0.0, proposed: int = 0,
        passes: Sequence[int] | None = None,
    ) -> None:  # fmt: skip
        """A step over ``forward_tokens`` tokens (every request's) took ``seconds``, run as
        ``passes`` (the rows of each; None: one forward)."""
        self.sizer.observe(
            drafted=forward_tokens - 1, draft_s=draft_s, verify_s=seconds, proposed=proposed, passes=passes
        )

    def forget(self, key: int) -> None:
        """``key`` left the batch: its drafter state and its proposals' ledger go."""
        self.drafter.forget(key)
        self.sizer.forget(key)
