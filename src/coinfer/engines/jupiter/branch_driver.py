"""Rank 0's side of branch decoding (``branches``): it lays out each call, keeps the cache
layout every stage holds (the same on all: they run the same calls in the same order), and
keeps one call per group of branches in flight, so that while the last stage verifies one
group's step the first stage already runs the next group's (paper 004 §V-B: the point
requests travel through the pipeline together).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from coinfer.decoding.self_draft import heads_tree
from coinfer.decoding.tree_sizer import TreeSizer
from coinfer.engines.jupiter.branches import BranchCall, BranchVerifier, Piece, branch_header, pass_branches
from coinfer.engines.jupiter.pipeline import STOP, Traffic, make_header, settle
from coinfer.engines.jupiter.tree_pipeline import cut_at_end

__all__ = ["Branch", "BranchDriver", "BranchRound"]


@dataclass
class Branch:
    """One branch being decoded: what it feeds next from ``start``, its heads' guesses,
    what it produced, and how many tokens it may."""

    branch: int
    start: int
    feed: list[int]
    budget: int
    guesses: list[int] = field(default_factory=list)
    produced: list[int] = field(default_factory=list)
    done: bool = False
    finish: str | None = None  # once done: "stop" (an end of generation, or ``stop``) or "length"


@dataclass
class BranchRound:
    """What one verification gave a branch."""

    branch: int
    tokens: list[int]
    drafted: int
    accepted: int
    finish: str | None = None


def stop_within(b: Branch, r: BranchRound, stop: Callable[[Branch], bool]) -> BranchRound:
    """End ``b`` at the first of round ``r``'s tokens after which ``stop`` holds: a head
    tree's round may carry several tokens past it, and the text must not depend on how
    many (greedy text equals one token a round's)."""
    produced, before = b.produced, len(b.produced) - len(r.tokens)
    for j in range(1, len(r.tokens) + 1):
        b.produced = produced[: before + j]
        if stop(b):
            b.done, b.finish = True, "stop"
            return BranchRound(r.branch, r.tokens[:j], r.drafted, r.accepted, "stop")
    b.produced = produced
    return r


@dataclass(frozen=True)
class _Slot:
    call: int
    node: int
    branch: int
    position: int


class BranchDriver:
    """Rank 0: sends calls, receives the answers, keeps the layout of every stage's cache."""

    def __init__(
        self, stage: Any, world: int, traffic: Traffic, *, eos: Collection[int], heads: int = 0,
        width: int = 1, choices: Sequence[Sequence[int]] = (), verifier: BranchVerifier | None = None,
        sizer: TreeSizer | None = None,
    ) -> None:  # fmt: skip
        """``sizer`` (made for ``choices``): each call, the part of them that pays."""
        self.stage, self.world, self.traffic, self.eos = stage, world, traffic, eos
        self.heads, self.width, self.choices, self.verifier = heads, width, choices, verifier
        self.sizer = sizer
        self.slots: list[_Slot] = []
        self.drops: list[int] = []  # mirror indices to drop with the next call
        self.flight: deque[tuple[int, BranchCall, Any]] = deque()
        self.pending: list[Any] = []
        self.calls = 0

    def hold(self, length: int) -> None:
        """The stages now hold ``length`` shared entries (a prompt read before)."""
        self.slots = [_Slot(-1, i, -1, i) for i in range(length)]

    def forget(self, keep: Callable[[int, int], bool]) -> None:
        """Drop, with the next call, every entry for which ``keep(branch, position)`` is false."""
        gone = {i for i, s in enumerate(self.slots) if not keep(s.branch, s.position)}
        self.drops = sorted(set(self.drops) | gone)

    # ---- one call ----------------------------------------------------------------------
    def _table(self, guesses: list[int]) -> list[list[int]]:
        return [guesses[d * self.width : (d + 1) * self.width] for d in range(self.heads)]

    def _piece(self, b: Branch, choices: Sequence[Sequence[int]]) -> Piece:
        if not (self.heads and b.guesses):
            return Piece(b.branch, b.start, tuple(b.feed))
        return Piece(b.branch, b.start, tuple(b.feed), heads_tree(self._table(b.guesses), choices))

    def send(self, branches: Sequence[Branch]) -> None:
        import torch

        choices = self.sizer.choose(len(branches)) if self.sizer else self.choices
        call = BranchCall.of([self._piece(b, choices) for b in branches])
        drops = self.drops
        gone = set(drops)
        self.slots = [s for i, s in enumerate(self.slots) if i not in gone]
        self.drops = []
        header_position = len(self.slots)
        self.calls += 1
        self.slots += [
            _Slot(self.calls, i, b, p)
            for i, (b, p) in enumerate(zip(call.branches, call.positions, strict=True))
        ]
        meta = call.meta(drops, with_tokens=self.world > 1)
        header = branch_header(header_position, len(call.tokens), meta)
        x = torch.tensor([call.tokens], dtype=torch.int64)
        reply, self.pending = pass_branches(
            self.stage, 0, self.world, header, meta, x, self.verifier, self.traffic, self.pending, call
        )
        self.flight.append((self.calls, call, reply))

    def receive(self) -> tuple[int, BranchCall, list[int]]:
        import torch
        import torch.distributed as dist

        number, call, reply = self.flight.popleft()
        if reply is None:  # the sends still pending are taken after this answer: not waited for here
            reply = torch.empty(call.reply_size(self.heads * self.width), dtype=torch.int64)
            dist.recv(reply, self.world - 1)
        return number, call, [int(v) for v in reply]

    # ---- what an answer means ----------------------------------------------------------
    def apply(
        self, number: int, call: BranchCall, reply: list[int], by: dict[int, Branch]
    ) -> list[BranchRound]:
        """Each piece's verified path, next token and guesses into its branch; the rejected
        candidates go with the next call."""
        rounds, at = [], 0
        rejected: set[tuple[int, int]] = set()
        for branch, root, count, _ in call.pieces:
            accepted = reply[at]
            path = reply[at + 1 : at + 1 + accepted]
            token = reply[at + 1 + count]
            at += 2 + count
            guesses, at = reply[at : at + self.heads * self.width], at + self.heads * self.width
            rejected |= {(number, root + 1 + j) for j in range(count) if j not in path}
            b = by[branch]
            b.start += len(b.feed) + accepted
            emitted = cut_at_end(
                [call.tokens[root + 1 + j] for j in path] + [token], self.eos, b.budget - len(b.produced)
            )
            b.produced += emitted
            b.feed, b.guesses = [token], guesses
            if self.sizer is not None and guesses:
                self.sizer.observe(self._table(guesses), emitted, stream=branch)
            if emitted and emitted[-1] in self.eos:
                b.done, b.finish = True, "stop"
            elif len(b.produced) >= b.budget:
                b.done, b.finish = True, "length"
            rounds.append(BranchRound(branch, emitted, count, accepted, b.finish))
        if rejected:
            self.drops = sorted(
                set(self.drops) | {i for i, s in enumerate(self.slots) if (s.call, s.node) in rejected}
            )
        return rounds

    def decode(
        self, groups: Sequence[Sequence[Branch]], stop: Callable[[Branch], bool] | None = None
    ) -> Generator[BranchRound, None, None]:
        """Decode every branch until done: one call per group in flight; ``stop`` may end
        a branch early (``stop_within``: where one token a round would have ended it)."""
        by = {b.branch: b for group in groups for b in group}
        home = {b.branch: g for g, group in enumerate(groups) for b in group}
        for group in groups:
            if any(not b.done for b in group):
                self.send([b for b in group if not b.done])
        last = None  # when the answer before came: with calls in flight, a call's cost is the gap
        while self.flight:
            number, call, reply = self.receive()
            now = time.perf_counter()
            if self.sizer is not None and last is not None:
                self.sizer.timed(len(call.tokens), now - last)
            last = now
            for r in self.apply(number, call, reply, by):
                yield r if stop is None else stop_within(by[r.branch], r, stop)
            group = groups[home[call.pieces[0][0]]]
            if any(not b.done for b in group):
                self.send([b for b in group if not b.done])

    def close(self) -> None:
        """Take the answers still on their way (the caller may have stopped early), then
        ``STOP`` to every rank."""
        import torch.distributed as dist

        while self.flight:
            self.receive()
        self.pending = settle(self.pending)
        if self.world > 1:
            dist.send(make_header(STOP, len(self.slots), 0, False), 1)
