import pytest

from coinfer.engines.collective.selector import LengthSelectorConfig, SpeculationLengthSelector, slope
from coinfer.errors import ConfigError


def _cost_per_token(s: int, best: int = 6) -> tuple[float, float]:
    """A decreasing-then-increasing cost per token with its minimum at ``best`` (Figure 2):
    verification time grows with s, the verified length saturates."""
    verify_s = 0.05 + 0.004 * s
    verified = 1 + sum(0.9**j for j in range(1, min(s, best) + 1)) + 0.02 * max(0, s - best)
    return verify_s, verified


def test_slope_is_least_squares() -> None:
    assert slope([1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert slope([3.0, 1.0]) == pytest.approx(-2.0) and slope([5.0]) == 0.0


def test_the_selector_climbs_to_the_best_length_and_stays_near_it() -> None:
    sel = SpeculationLengthSelector(LengthSelectorConfig(s_start=1, decision_threshold=4))
    for _ in range(400):
        sel.observe(*_cost_per_token(sel.s))
    costs = {s: v / t for s in range(13) for v, t in [_cost_per_token(s)]}
    best = min(costs, key=costs.__getitem__)
    late = sel.history[-40:]
    assert abs(sum(late) / len(late) - best) <= 1.5


def test_when_drafts_never_hold_the_selector_goes_to_plain_decoding() -> None:
    sel = SpeculationLengthSelector(LengthSelectorConfig(s_start=4, decision_threshold=4))
    for _ in range(200):
        sel.observe(0.05 + 0.01 * sel.s, 1.0)
    assert min(sel.history[-10:]) == 0 and max(sel.history[-10:]) <= 1


def test_bad_selector_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        LengthSelectorConfig(s_start=13)
    with pytest.raises(ConfigError):
        LengthSelectorConfig(decision_threshold=1)
    with pytest.raises(ConfigError):
        SpeculationLengthSelector().observe(0.1, 0)
