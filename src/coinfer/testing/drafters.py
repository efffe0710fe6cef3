"""The fake of the drafter contract: drafts from a script, every call recorded."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from coinfer.decoding.drafters import Draft, Drafter

__all__ = ["FixedDrafter"]


class FixedDrafter(Drafter):
    """Proposes ``draft(context)`` (a function of the context) or, given a list, that list,
    cut to k. ``proposals``: every (key, context, k); ``feedbacks``: every (key, context, kept)."""

    def __init__(
        self, draft: Callable[[list[int]], Sequence[int]] | Sequence[int], *, name: str = "fixed"
    ) -> None:
        self.name = name
        self._draft = draft
        self.proposals: list[tuple[int, list[int], int]] = []
        self.feedbacks: list[tuple[int, list[int], list[int]]] = []
        self.forgotten: list[int] = []

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[Draft]:
        out = []
        for key, context in contexts:
            self.proposals.append((key, list(context), k))
            tokens = self._draft(list(context)) if callable(self._draft) else self._draft
            out.append(Draft([int(t) for t in tokens][: max(0, k)]))
        return out

    def feedback(self, key: int, context: Sequence[int], kept: Sequence[int]) -> None:
        self.feedbacks.append((key, list(context), list(kept)))

    def forget(self, key: int) -> None:
        self.forgotten.append(key)
