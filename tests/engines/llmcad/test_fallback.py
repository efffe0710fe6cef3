"""The self-adaptive fallback (§3.3): T_c and Eq. 3."""

from __future__ import annotations

import pytest

from coinfer.engines.llmcad import AdaptiveThreshold, next_alpha, tree_confidence


def test_tree_cumulative_confidence_is_the_most_confident_branch() -> None:
    assert tree_confidence([0.2, 0.7, 0.05]) == 0.7
    assert tree_confidence([]) == 1.0


def test_eq3_halves_alpha_when_the_branch_held_and_else_takes_its_error_rate() -> None:
    assert next_alpha(0.01, 5, 5) == 0.005
    assert next_alpha(0.01, 3, 4) == pytest.approx(0.25)
    assert next_alpha(0.01, 0, 4) == 1.0
    assert next_alpha(0.2, 0, 0) == 0.2  # nothing drafted: nothing learned


def test_the_threshold_fires_below_alpha_and_keeps_its_history() -> None:
    t = AdaptiveThreshold(0.01)
    assert not t.due([0.5, 0.011])
    assert t.due([0.009, 0.002])
    t.update(4, 4)
    t.update(1, 2)
    assert t.history == [0.01, 0.005, 0.5]
    assert t.alpha == 0.5 and t.due([0.45]) and not t.due([0.6])
