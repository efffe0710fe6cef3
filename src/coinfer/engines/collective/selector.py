"""The adaptive speculation length selector (paper 001, §3.3, Eq. 2–4).

The target's time per generated token is ``t_LLM(b, s) / vl(s)``: the time of one
verification over ``s`` drafted tokens per request, over the tokens each request gains
from it. An online monitor records that ratio at every verification. Once it holds
``decision_threshold`` observations since the last change of ``s``, a least-squares line
is fitted to them in the order they came, together with the observations made just
before the change, so the fit spans the change. A rising line says the change made
tokens dearer, a falling one cheaper. ``s`` is then moved by ``s_reward`` in the
direction that helped, or by ``s_punish`` back, within ``[s_min, s_max]``; ``s = 0`` is
plain decoding, so a selector that finds drafts useless stops drafting.

The paper words the rule for a change upwards (rising: subtract ``s_punish``; falling:
add ``s_reward``). Applied after a change downwards, that rule would keep shrinking
``s`` below the optimum whenever the cut hurt; here the move follows the sign of the
last change, which is the paper's rule whenever the last change was up.

``vl`` counts the target's own token too (accepted drafts + 1), so that ``s = 0`` has a
finite ratio and the ratio is exactly seconds per generated token.
"""

from __future__ import annotations

from dataclasses import dataclass

from coinfer.errors import ConfigError

__all__ = ["LengthSelectorConfig", "SpeculationLengthSelector", "slope"]


@dataclass(frozen=True)
class LengthSelectorConfig:
    s_start: int = 4
    s_min: int = 0
    s_max: int = 12
    decision_threshold: int = 8
    s_reward: int = 1
    s_punish: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.s_min <= self.s_start <= self.s_max:
            raise ConfigError("need 0 <= s_min <= s_start <= s_max")
        if self.decision_threshold < 2 or self.s_reward < 1 or self.s_punish < 1:
            raise ConfigError("need decision_threshold >= 2 and s_reward, s_punish >= 1")


def slope(ys: list[float]) -> float:
    """The least-squares slope of ``ys`` against 0, 1, 2, …"""
    n = len(ys)
    if n < 2:
        return 0.0
    mean_x, mean_y = (n - 1) / 2, sum(ys) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(ys))
    den = sum((x - mean_x) ** 2 for x in range(n))
    return num / den


class SpeculationLengthSelector:
    """Chooses ``s`` for the next drafts from the monitored cost per generated token."""

    def __init__(self, config: LengthSelectorConfig = LengthSelectorConfig()) -> None:  # noqa: B008
        self.config = config
        self.s = config.s_start
        self._before: list[float] = []  # the ratios observed at the previous s
        self._now: list[float] = []  # the ratios observed since the last change
        self._last_move = 1  # the paper starts by growing s
        self.history: list[int] = [self.s]  # s after every decision

    def observe(self, verify_s: float, verified: float) -> None:
        """One verification: its time, and the tokens it gave each request on average
        (accepted drafts + 1)."""
        if verified <= 0 or verify_s < 0:
            raise ConfigError(f"need verified > 0 and verify_s >= 0, got {verified}, {verify_s}")
        self._now.append(verify_s / verified)
        if len(self._now) >= self.config.decision_threshold:
            self._decide()

    def _decide(self) -> None:
        c = self.config
        trend = slope(self._before[-c.decision_threshold :] + self._now)
        move = self._last_move if trend < 0 else -self._last_move
        step = c.s_reward if trend < 0 else c.s_punish
        new = min(c.s_max, max(c.s_min, self.s + move * step))
        if new == self.s:  # at a bound: turn around next time rather than push on
            move = -move
        self._last_move = move if new == self.s else (1 if new > self.s else -1)
        self._before, self._now = self._now, []
        self.s = new
        self.history.append(new)
