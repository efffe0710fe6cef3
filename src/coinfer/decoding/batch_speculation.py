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
the floor. Greedy acceptance only: a request that samples decodes plainly in the batch.

The loop that owns the batch (``chat.LocalChat.step``) calls ``drafts`` before its
forward, ``accepted`` per request after it, and ``measured`` with the forward's size and
seconds; ``forget`` when a request leaves.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from coinfer.decoding.draft_length import AdaptiveDraftLength, CostCurve, DraftSizer
from coinfer.decoding.drafters import Draft, Drafter

__all__ = ["BATCH_FLOOR", "BatchSpeculator", "accepted_length"]

BATCH_FLOOR = 0.97  # each request keeps at least this share of its plain rate in a drafting forward


def accepted_length(draft: Sequence[int], choices: Sequence[int]) -> int:
    """How many leading draft tokens the target agrees with: ``choices[i]`` is its greedy
    token after the context and ``draft[:i]`` (so ``choices`` has one more entry than
    ``draft``, and ``choices[n]`` is the target's own next token after ``n`` kept)."""
    n = 0
    while n < len(draft) and int(choices[n]) == int(draft[n]):
        n += 1
    return n


@dataclass
class BatchSpeculator:
    """One drafter for every request of a batch, sized by one policy over the target's
    cost curve (``costs``: shared by every batch on that target, ``speculative.target_costs``)."""

    drafter: Drafter
    sizer: DraftSizer

    @classmethod
    def over(cls, drafter: Drafter, costs: CostCurve, *, batch_floor: float = BATCH_FLOOR) -> BatchSpeculator:
        return cls(drafter, DraftSizer(AdaptiveDraftLength(costs=costs, batch_floor=batch_floor)))

    def drafts(
        self, rows: Sequence[tuple[int, list[int], int]], others: int
    ) -> tuple[list[list[int]], float, int]:
        """Each row's draft, cut together: rows are (key, context, most tokens it may take);
        ``others``: the forward's requests that do not draft. Returns the drafts, the
        seconds drafting took and the tokens proposed before the cut."""
        k = self.sizer.next_k()
        if k <= 0 or not rows:
            return [[] for _ in rows], 0.0, 0
        for key, context, _ in rows:
            self.sizer.learn(key, context)
        t0 = time.perf_counter()
        proposed = self.drafter.propose_many([(key, context) for key, context, _ in rows], k)
        seconds = time.perf_counter() - t0
        capped = [d.head(max(0, most)) for d, (_, _, most) in zip(proposed, rows, strict=True)]
        items = [(key, len(context), d) for (key, context, _), d in zip(rows, capped, strict=True)]
        cut: list[Draft] = self.sizer.cut_together(items, others)
        return [list(d.tokens) for d in cut], seconds, sum(len(d.tokens) for d in proposed)

    def accepted(self, key: int, context: list[int], draft: list[int], choices: Sequence[int]) -> list[int]:
        """The tokens ``key`` keeps from this forward: its draft's agreed prefix, then the
        target's own next token; the drafter hears what the target produced."""
        n = accepted_length(draft, choices)
        kept = [*draft[:n], int(choices[n])]
        self.drafter.feedback(key, context, kept)
        return kept

    def measured(
        self, forward_tokens: int, seconds: float, *, draft_s: float = 0.0, proposed: int = 0
    ) -> None:
        """A forward over ``forward_tokens`` tokens (every request's) took ``seconds``."""
        self.sizer.observe(drafted=forward_tokens - 1, draft_s=draft_s, verify_s=seconds, proposed=proposed)

    def forget(self, key: int) -> None:
        """``key`` left the batch: its drafter state and its proposals' ledger go."""
        self.drafter.forget(key)
        self.sizer.forget(key)
