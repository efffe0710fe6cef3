"""The self-adaptive fallback (§3.3): T_c and Eq. 3."""

from __future__ import annotations

import pytest

from coinfer.engines.llmcad import AdaptiveThreshold, next_alpha, tree_confidence
from coinfer.engines.llmcad.fallback import VerifyCost


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


def test_after_an_error_a_costly_verification_waits_until_drafting_on_no_longer_pays() -> None:
    """Eq. 3 set alpha to 0.9 after an error; a verification costs 70 draft tokens. A
    four-token tree expected to keep 3 makes (1 + 3) / (70 + 4) tokens per draft token's
    time, so a next token kept with 0.5 still pays and one kept with 0.04 does not."""
    costs = VerifyCost()
    assert costs.floor(3.0, 4) == 1.0  # nothing measured yet: alpha alone decides
    costs.observe(drafted=10, draft_s=0.2, verify_s=1.4)
    assert costs.floor(3.0, 4) == pytest.approx(4 / 74)
    t = AdaptiveThreshold(0.01)
    t.update(1, 10)
    assert t.alpha == pytest.approx(0.9)
    assert not t.due([0.5], costs.floor(3.0, 4))
    assert t.due([0.04], costs.floor(3.0, 4))
    assert t.due([0.5])  # Eq. 3 alone would verify the four tokens now


def test_where_verifying_is_cheap_alpha_decides() -> None:
    costs = VerifyCost()
    costs.observe(drafted=4, draft_s=0.08, verify_s=0.04)  # a compute-bound target
    t = AdaptiveThreshold(0.01)
    assert t.due([0.009], costs.floor(2.0, 4)) and not t.due([0.02], costs.floor(2.0, 4))
    costs.observe(drafted=4, draft_s=0.08, verify_s=2.0)  # averages move halfway
    assert costs.verify_s == pytest.approx(1.02) and costs.draft_s == pytest.approx(0.02)
