"""Prompt lookup: a drafter that copies what followed the latest earlier occurrence of the
context's last n-gram. It calls no model, so its drafts cost next to nothing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from coinfer.decoding.draft_length import CopyBucket
from coinfer.decoding.drafters import Draft, Drafter
from coinfer.errors import ConfigError

__all__ = ["NgramDrafter"]


@dataclass
class _Lookup:
    """One request's index: for every n-gram seen, where its latest continuation starts."""

    seen: list[int] = field(default_factory=list)
    next: dict[tuple[int, ...], int] = field(default_factory=dict)
    previous: tuple[int, int] | None = None  # (context length, first token) of the last proposal


class NgramDrafter(Drafter):
    """Prompt lookup: continue the latest earlier occurrence of the context's last n-gram.

    Tries n from ``max_n`` down to ``min_n``. Each request's index is extended
    incrementally as its context grows (and rebuilt if the context is not an extension).

    The draft's bucket says how far to trust it, as ``(match, warm)``:

    * ``match``: how long the context's suffix equals the text before the copied
      continuation, counted back past ``max_n`` up to ``horizon`` tokens and graded
      1, 2, 3, 4, 5 (5–7), 8 (8–15), 16 (16–31), 32 (32 or more). Deep inside a copied
      passage the match is long; a coincidental match on a common phrase is short.
    * ``warm``: whether the first token of this request's previous proposal was the
      token that followed. Copying comes in runs: while it holds, short matches hold
      too; in freshly written text they mostly fail.

    Only a match of at least ``deep_match`` tokens may propose more than
    ``shallow_tokens``: on a CPU a forward over 48 tokens costs about ten plain ones,
    and a shallow match's record is too thin and too mixed to bet that much on.
    """

    name = "ngram"
    GRADES = (32, 16, 8, 5, 4, 3, 2, 1)

    def __init__(
        self,
        *,
        min_n: int = 1,
        max_n: int = 8,
        horizon: int = 64,
        deep_match: int = 32,
        shallow_tokens: int = 16,
    ) -> None:
        if not 1 <= min_n <= max_n <= horizon:
            raise ConfigError(f"need 1 <= min_n <= max_n <= horizon, got {min_n}, {max_n}, {horizon}")
        if shallow_tokens < 1:
            raise ConfigError(f"shallow_tokens must be at least 1, got {shallow_tokens}")
        self.min_n, self.max_n, self.horizon = min_n, max_n, horizon
        self.deep_match, self.shallow_tokens = deep_match, shallow_tokens
        self._lookups: dict[int, _Lookup] = {}

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[Draft]:
        return [self._propose(self._lookups.setdefault(key, _Lookup()), list(c), k) for key, c in contexts]

    def forget(self, key: int) -> None:
        self._lookups.pop(key, None)

    def close(self) -> None:
        self._lookups.clear()

    def _propose(self, lookup: _Lookup, context: list[int], k: int) -> Draft:
        self._index(lookup, context)
        warm = _previous_held(lookup, context)
        lookup.previous = None
        if k <= 0:
            return Draft([])
        for n in range(min(self.max_n, len(context)), self.min_n - 1, -1):
            start = lookup.next.get(tuple(context[-n:]))
            if start is not None:
                match = self._match_length(context, start, n)
                if match < self.deep_match:
                    k = min(k, self.shallow_tokens)
                tokens = context[start : start + k]
                lookup.previous = (len(context), tokens[0])
                return Draft(tokens, bucket=CopyBucket(self._grade(match), warm))
        return Draft([])

    def _index(self, lookup: _Lookup, context: list[int]) -> None:
        if context[: len(lookup.seen)] != lookup.seen:  # not an extension: start over
            lookup.seen, lookup.next, lookup.previous = [], {}, None
        for j in range(len(lookup.seen), len(context)):
            for n in range(self.min_n, self.max_n + 1):
                if j - n >= 0:
                    lookup.next[tuple(context[j - n : j])] = j
        lookup.seen = context

    def _match_length(self, context: list[int], start: int, n: int) -> int:
        """How many tokens before ``start`` equal the context's last ones (at least ``n``)."""
        end = len(context)
        while n < self.horizon and n < start and context[start - n - 1] == context[end - n - 1]:
            n += 1
        return n

    def _grade(self, length: int) -> int:
        return next(g for g in self.GRADES if length >= g)


def _previous_held(lookup: _Lookup, context: list[int]) -> bool:
    """Whether the first token of the request's previous proposal is the one that came."""
    if lookup.previous is None:
        return False
    at, token = lookup.previous
    return len(context) > at and context[at] == token
