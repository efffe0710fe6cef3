"""Rank 0's branch driver: a branch that a ``stop`` ends is cut where one token a round
would have ended it, however many tokens its last round carried (head trees)."""

from __future__ import annotations

from coinfer.engines.jupiter.branch_driver import Branch, BranchRound, stop_within

NEWLINE = 10


def _after(produced_before: list[int], tokens: list[int]) -> tuple[Branch, BranchRound]:
    b = Branch(branch=2, start=0, feed=[], budget=64, produced=[*produced_before, *tokens])
    return b, BranchRound(2, tokens, drafted=4, accepted=len(tokens) - 1)


def _line_over(b: Branch) -> bool:
    return NEWLINE in b.produced


def test_a_round_that_runs_past_the_stop_is_cut_after_the_token_that_made_it_hold() -> None:
    b, r = _after([1, 2], [3, NEWLINE, 4, 5])
    cut = stop_within(b, r, _line_over)
    assert cut.tokens == [3, NEWLINE] and cut.finish == "stop"
    assert b.produced == [1, 2, 3, NEWLINE] and b.done and b.finish == "stop"
    assert (cut.branch, cut.drafted, cut.accepted) == (2, 4, 3)


def test_a_round_whose_first_token_stops_keeps_only_it() -> None:
    b, r = _after([1], [NEWLINE, 7, 8])
    assert stop_within(b, r, _line_over).tokens == [NEWLINE] and b.produced == [1, NEWLINE]


def test_a_round_the_stop_does_not_hold_after_is_left_whole() -> None:
    b, r = _after([1], [3, 4, 5])
    assert stop_within(b, r, _line_over) is r
    assert b.produced == [1, 3, 4, 5] and not b.done and b.finish is None
