"""How many tokens to draft each round: fixed, or chosen online to maximise tokens/s.

``AdaptiveDraftLength`` keeps two online estimates:

* the target's verification cost ``t(n)`` of one forward over n = k + 1 tokens, per n
  (an exponential moving average; unmeasured sizes are interpolated between measured
  ones, and extrapolated with the last measured slope): on a CPU this curve is steep
  and not monotonic (MODELS.md, ``coinfer bench decode``), so it is measured, not assumed;
* the drafter's per-token acceptance ``a``, from a geometric model of acceptance: a
  round that drafted k and kept m < k is m successes and one failure (maximum
  likelihood ``a = successes / (successes + failures)``, with a weak prior of 1/2, and
  past rounds decayed by ``memory`` because n-gram drafts come in bursts); plus the
  drafter's own cost per drafted token.

Expected tokens per round with k drafts is ``E(k) = 1 + a + a^2 + … + a^k`` (the
target's own token always counts), so it picks ``argmax_k E(k) / (draft(k) + t(k + 1))``
over k = 0 … k_max. k = 0 is plain decoding, so when drafts do not pay, it stops
drafting: speculation is never knowingly slower. Every ``explore_every`` rounds it tries
one size more than its choice when that size is predicted within 10% of it, and every
``probe_every`` rounds regardless, so that the curve around the optimum stays measured
and a drafter that starts to match again is noticed (at most ~2% lost when it never does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from coinfer.errors import ConfigError

__all__ = ["AdaptiveDraftLength", "DraftLength", "FixedDraftLength"]


class DraftLength(Protocol):
    """Chooses k before a round and learns from what the round cost and kept."""

    def next_k(self) -> int: ...

    def observe(self, *, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None: ...


@dataclass
class FixedDraftLength:
    """Always the same k."""

    k: int

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ConfigError(f"draft_tokens must be >= 0, got {self.k}")

    def next_k(self) -> int:
        return self.k

    def observe(self, *, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        return None


@dataclass
class AdaptiveDraftLength:
    """Pick k to maximise expected tokens per second from measured costs and acceptance."""

    k_max: int = 12
    k_start: int = 4
    smoothing: float = 0.3  # weight of a new measurement in the moving averages
    explore_every: int = 8
    probe_every: int = 32  # an exploration round even when it looks hopeless (drafts are bursty)
    memory: float = 0.9  # decay of past acceptance evidence per drafting round
    _verify: dict[int, float] = field(default_factory=dict)  # n -> seconds of a forward over n tokens
    _draft_per_token: float | None = None  # seconds per drafted token
    _successes: float = 1.0  # prior: acceptance 1/2
    _failures: float = 1.0
    _rounds: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.k_start <= self.k_max or not 0 < self.smoothing <= 1 or self.explore_every < 1:
            raise ConfigError("need 0 <= k_start <= k_max, 0 < smoothing <= 1 and explore_every >= 1")

    @property
    def acceptance(self) -> float:
        return self._successes / (self._successes + self._failures)

    def verify_cost(self, n: int) -> float | None:
        """Estimated seconds of one target forward over n tokens (None before any measurement)."""
        if not self._verify:
            return None
        if n in self._verify:
            return self._verify[n]
        sizes = sorted(self._verify)
        below, above = [s for s in sizes if s < n], [s for s in sizes if s > n]
        if below and above:
            lo, hi = below[-1], above[0]
            w = (n - lo) / (hi - lo)
            return (1 - w) * self._verify[lo] + w * self._verify[hi]
        if above:  # below every measurement: no cheaper than the smallest measured size
            return self._verify[above[0]]
        top = below[-1]
        slope = (self._verify[top] - self._verify[below[-2]]) / (top - below[-2]) if len(below) > 1 else 0.0
        per_token = max(slope, self._verify[top] / top * 0.5)  # never assume extra tokens are free
        return self._verify[top] + per_token * (n - top)

    def expected_tokens(self, k: int) -> float:
        a = self.acceptance
        return sum(a**i for i in range(k + 1))

    def tokens_per_second(self, k: int) -> float | None:
        cost = self.verify_cost(k + 1)
        if cost is None:
            return None
        return self.expected_tokens(k) / (cost + (self._draft_per_token or 0.0) * k)

    def best_k(self) -> int:
        scores = {k: self.tokens_per_second(k) for k in range(self.k_max + 1)}
        if any(v is None for v in scores.values()):
            return self.k_start
        return max(scores, key=lambda k: (scores[k], -k))  # type: ignore[arg-type,return-value]

    def next_k(self) -> int:
        if 1 not in self._verify and self._rounds > 0:  # measure plain decoding once, early
            return 0
        best = self.best_k()
        if not self._rounds or best >= self.k_max:
            return best
        if self._rounds % self.probe_every == 0:
            return best + 1
        if self._rounds % self.explore_every == 0:
            here, there = self.tokens_per_second(best), self.tokens_per_second(best + 1)
            if here and there and there >= 0.9 * here:  # only where it might pay
                return best + 1
        return best

    def observe(self, *, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        self._rounds += 1
        n = drafted + 1
        old = self._verify.get(n)
        self._verify[n] = verify_s if old is None else (1 - self.smoothing) * old + self.smoothing * verify_s
        if drafted:
            per_token = draft_s / drafted
            old_d = self._draft_per_token
            self._draft_per_token = (
                per_token if old_d is None else (1 - self.smoothing) * old_d + self.smoothing * per_token
            )
            # recent rounds count more: n-gram drafts come in bursts (copied code, then prose)
            self._successes = self.memory * self._successes + accepted
            self._failures = self.memory * self._failures + (1 if accepted < drafted else 0)
