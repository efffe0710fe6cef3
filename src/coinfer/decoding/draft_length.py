"""How many tokens to draft each round: fixed, or chosen online to maximise tokens/s.

``AdaptiveDraftLength`` keeps online estimates of

* the target's verification cost ``t(n)`` of one forward over n = k + 1 tokens, per n
  (an exponential moving average; unmeasured sizes are interpolated between measured
  ones, and extrapolated with the last measured slope): on a CPU this curve is steep
  and not monotonic (MODELS.md, ``coinfer bench decode``), so it is measured, not assumed;
* the drafter's per-token acceptance ``a``, from a geometric model of acceptance: a
  round that drafted k and kept m < k is m successes and one failure (maximum
  likelihood ``a = successes / (successes + failures)``), past rounds decayed by
  ``memory`` because n-gram drafts come in bursts. It is kept per *bucket*, a
  confidence class the drafter puts on each draft (the n-gram drafter's bucket is the
  length of the match: a 12-token match is copied far more reliably than a 1-token
  one); a bucket with little evidence leans on the drafter's overall rate;
* the drafter's own cost per proposed token.

Expected tokens per round with k drafts is ``E(k) = 1 + a + a^2 + … + a^k`` (the
target's own token always counts), so it picks ``argmax_k E(k) / (draft(k) + t(k + 1))``
over k = 0 … k_max. k = 0 is plain decoding, so when drafts do not pay, it stops
drafting: speculation is never knowingly slower. A drafter that costs next to nothing
(n-gram lookup) is asked for ``k_max`` tokens and the draft is cut to the best k for its
bucket (``trim``); a costly one (a draft model) is asked for the best k directly.
Every ``explore_every`` rounds it measures an untried size that would beat its choice
if that forward cost no more than the nearest measured smaller one (CPU cost curves
flatten past kernel tile sizes, so extrapolation alone never finds the long drafts that
pay), or else tries one size more than its choice when that is predicted within 10% of
it; and every ``probe_every`` rounds one size more regardless, so that a drafter that
starts to match again is noticed (at most a few % lost when it never does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from coinfer.errors import ConfigError

__all__ = ["AdaptiveDraftLength", "DraftLength", "FixedDraftLength"]


class DraftLength(Protocol):
    """Chooses k before a round and learns from what the round cost and kept."""

    def next_k(self) -> int:
        """How many tokens to ask the drafter for."""
        ...

    def trim(self, proposed: int, bucket: int) -> int:
        """How many of the ``proposed`` tokens, drafted with confidence ``bucket``, to verify."""
        ...

    def observe(
        self,
        *,
        drafted: int,
        accepted: int,
        draft_s: float,
        verify_s: float,
        bucket: int = 0,
        proposed: int = 0,
    ) -> None: ...


@dataclass
class FixedDraftLength:
    """Always the same k."""

    k: int

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ConfigError(f"draft_tokens must be >= 0, got {self.k}")

    def next_k(self) -> int:
        return self.k

    def trim(self, proposed: int, bucket: int) -> int:
        return proposed

    def observe(
        self,
        *,
        drafted: int,
        accepted: int,
        draft_s: float,
        verify_s: float,
        bucket: int = 0,
        proposed: int = 0,
    ) -> None:
        return None


@dataclass
class _Evidence:
    """Decayed counts of kept drafted tokens (successes) and rejections (failures)."""

    successes: float
    failures: float

    def add(self, drafted: int, accepted: int, memory: float) -> None:
        self.successes = memory * self.successes + accepted
        self.failures = memory * self.failures + (1 if accepted < drafted else 0)

    @property
    def total(self) -> float:
        return self.successes + self.failures


@dataclass
class AdaptiveDraftLength:
    """Pick k to maximise expected tokens per second from measured costs and acceptance."""

    k_max: int = 16
    k_start: int = 4
    smoothing: float = 0.3  # weight of a new measurement in the moving averages
    explore_every: int = 8
    probe_every: int = 32  # an exploration round even when it looks hopeless (drafts are bursty)
    memory: float = 0.9  # decay of past acceptance evidence per drafting round
    bucket_prior: float = 2.0  # how many observations the overall rate is worth in a bucket
    cheap_fraction: float = 0.05  # drafting k_max tokens under this share of t(1) is "free"
    _verify: dict[int, float] = field(default_factory=dict)  # n -> seconds of a forward over n tokens
    _draft_per_token: float | None = None  # seconds per proposed token
    _overall: _Evidence = field(default_factory=lambda: _Evidence(1.0, 1.0))  # prior: acceptance 1/2
    _buckets: dict[int, _Evidence] = field(default_factory=dict)
    _rounds: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.k_start <= self.k_max or not 0 < self.smoothing <= 1 or self.explore_every < 1:
            raise ConfigError("need 0 <= k_start <= k_max, 0 < smoothing <= 1 and explore_every >= 1")

    def acceptance(self, bucket: int | None = None) -> float:
        """Estimated per-token acceptance of drafts in ``bucket`` (None: all drafts)."""
        a = self._overall.successes / self._overall.total
        ev = self._buckets.get(bucket) if bucket is not None else None
        if ev is None:
            return a
        return (ev.successes + self.bucket_prior * a) / (ev.total + self.bucket_prior)

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

    def expected_tokens(self, k: int, bucket: int | None = None) -> float:
        a = self.acceptance(bucket)
        return sum(a**i for i in range(k + 1))

    def tokens_per_second(self, k: int, bucket: int | None = None) -> float | None:
        cost = self.verify_cost(k + 1)
        if cost is None:
            return None
        draft = 0.0 if self.drafter_is_cheap() else (self._draft_per_token or 0.0) * k
        return self.expected_tokens(k, bucket) / (cost + draft)

    def best_k(self, bucket: int | None = None) -> int:
        scores = {k: self.tokens_per_second(k, bucket) for k in range(self.k_max + 1)}
        if any(v is None for v in scores.values()):
            return self.k_start
        return max(scores, key=lambda k: (scores[k], -k))  # type: ignore[arg-type,return-value]

    def drafter_is_cheap(self) -> bool:
        """Whether proposing ``k_max`` tokens costs next to nothing next to one target forward."""
        t1 = self._verify.get(1)
        d = self._draft_per_token
        return t1 is not None and d is not None and d * self.k_max <= self.cheap_fraction * t1

    def next_k(self) -> int:
        if self.drafter_is_cheap():
            return self.k_max
        return self._choose(None)

    def trim(self, proposed: int, bucket: int) -> int:
        if not self.drafter_is_cheap():
            return proposed
        return min(proposed, self._choose(bucket))

    def _choose(self, bucket: int | None) -> int:
        if 1 not in self._verify and self._rounds > 0:  # measure plain decoding once, early
            return 0
        best = self.best_k(bucket)
        if not self._rounds or best >= self.k_max:
            return best
        if self._rounds % self.probe_every == 0:
            return best + 1
        if self._rounds % self.explore_every == 0:
            here = self.tokens_per_second(best, bucket) or 0.0
            hopeful = self._most_hopeful_unmeasured(bucket)
            if hopeful is not None and hopeful[1] > here:
                return hopeful[0]
            there = self.tokens_per_second(best + 1, bucket)
            if here and there and there >= 0.9 * here:  # only where it might pay
                return best + 1
        return best

    def _most_hopeful_unmeasured(self, bucket: int | None) -> tuple[int, float] | None:
        """The unmeasured k with the best rate if its forward cost no more than the nearest
        measured smaller one (CPU curves flatten past kernel tile sizes), and that rate."""
        measured = sorted(self._verify)
        best: tuple[int, float] | None = None
        for k in range(1, self.k_max + 1):
            if k + 1 in self._verify:
                continue
            floor = max((n for n in measured if n < k + 1), default=None)
            if floor is None:
                continue
            rate = self.expected_tokens(k, bucket) / self._verify[floor]
            if best is None or rate > best[1]:
                best = (k, rate)
        return best

    def observe(
        self,
        *,
        drafted: int,
        accepted: int,
        draft_s: float,
        verify_s: float,
        bucket: int = 0,
        proposed: int = 0,
    ) -> None:
        self._rounds += 1
        n = drafted + 1
        old = self._verify.get(n)
        self._verify[n] = verify_s if old is None else (1 - self.smoothing) * old + self.smoothing * verify_s
        proposed = max(proposed, drafted)
        if proposed:
            per_token = draft_s / proposed
            old_d = self._draft_per_token
            self._draft_per_token = (
                per_token if old_d is None else (1 - self.smoothing) * old_d + self.smoothing * per_token
            )
        if drafted:
            # recent rounds count more: n-gram drafts come in bursts (copied code, then prose)
            self._overall.add(drafted, accepted, self.memory)
            self._buckets.setdefault(bucket, _Evidence(0.0, 0.0)).add(drafted, accepted, self.memory)
