"""Draft proposals scored, token by token, against what the target goes on to produce
(``ProposalLedger``): what ``draft_length``'s policies learn from."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

__all__ = ["ProposalLedger"]


class ProposalLedger:
    """Proposals being scored, token by token, against what the target goes on to produce.

    A proposal made at context length ``at`` is scored at each position as soon as the
    target's token there is known, until it first differs or ends; the part trimmed off
    before verification is scored too, at no cost. Scoring as tokens arrive (rather
    than once a proposal is decided) keeps long proposals from being learned late.
    """

    def __init__(self) -> None:
        self._open: list[_Proposal] = []

    def add(self, at: int, tokens: list[int], bucket: Hashable) -> None:
        if tokens:
            self._open.append(_Proposal(at, list(tokens), bucket))

    def resolve(self, context: Sequence[int]) -> list[tuple[Hashable, int, bool]]:
        """(bucket, position, kept) for every proposal position the context now decides."""
        events: list[tuple[Hashable, int, bool]] = []
        still = []
        for p in self._open:
            known = min(len(p.tokens), len(context) - p.at)
            missed = False
            while p.scored < known and not missed:
                missed = context[p.at + p.scored] != p.tokens[p.scored]
                p.scored += 1
                events.append((p.bucket, p.scored, not missed))
            if not missed and p.scored < len(p.tokens):
                still.append(p)
        self._open = still
        return events


@dataclass
class _Proposal:
    at: int  # context length when it was proposed
    tokens: list[int]
    bucket: Hashable
    scored: int = 0  # positions compared so far
