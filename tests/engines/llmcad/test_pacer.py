"""The confidence-based branch pacer (§3.2, Eq. 1-2)."""

from __future__ import annotations

import pytest

from coinfer.engines.llmcad import fair_share_gaps, pick_branch


def test_each_branch_is_owed_tokens_in_proportion_to_its_cumulative_confidence() -> None:
    # M = 10 tokens, confidences 0.6 and 0.2 (of 0.8): shares 7.5 and 2.5
    assert fair_share_gaps([0.6, 0.2], [5, 3], 10) == pytest.approx([2.5, -0.5])
    assert fair_share_gaps([0.0, 0.0], [1, 2], 4) == [-1.0, -2.0]


def test_the_branch_furthest_below_its_share_grows_next() -> None:
    assert pick_branch([0.6, 0.2], [5, 3], 10, [True, True]) == 0
    assert pick_branch([0.6, 0.2], [8, 1], 10, [True, True]) == 1
    assert pick_branch([0.6, 0.2], [5, 3], 10, [False, True]) == 1  # an ended branch never grows
    assert pick_branch([0.5, 0.5], [2, 2], 5, [True, True]) == 0  # a tie: the first
    assert pick_branch([0.4, 0.5], [2, 2], 5, [True, True]) == 1
    assert pick_branch([0.6], [3], 4, [False]) is None


def test_max_min_fairness_lengthens_branches_in_proportion_to_confidence() -> None:
    """Giving each token to the branch furthest below its share keeps every branch within
    one token of its share of the tree (the smallest gap as large as it can be)."""
    confidences = [0.5, 0.3, 0.2]
    lengths = [0, 0, 0]
    for total in range(1, 31):
        lengths[pick_branch(confidences, lengths, total, [True] * 3)] += 1  # type: ignore[index]
        gaps = fair_share_gaps(confidences, lengths, total)
        assert min(gaps) > -1.0
    assert lengths == [15, 9, 6]
