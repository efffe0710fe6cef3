"""How many tokens to draft each round: fixed, or chosen online to maximise tokens/s.

``AdaptiveDraftLength`` keeps online estimates of

* the target's verification cost ``t(n)`` of one forward over n = k + 1 tokens, per n
  (an exponential moving average; unmeasured sizes are interpolated between measured
  ones; past the largest, each token costs half that size's average): on a CPU this
  curve is steep and not monotonic (a forward over 2 tokens cost 1.9 over 1 here, over
  17 tokens 9.9), so it is measured, not assumed. ``costs`` shares one curve between
  every request on the same target, so a request starts knowing what its predecessors
  measured (``speculative.target_costs``);
* how far the drafter's proposals hold: for each draft position j, the chance that a
  draft whose first j - 1 tokens were kept keeps the j-th (decayed counts, ``memory``,
  because n-gram drafts come in bursts). Not one per-token rate: a copy that has held
  for three tokens usually holds for ten, while most one-token matches fail at once.
  Proposals are scored on the tokens the target went on to produce, including the
  part trimmed off and never verified (``learn``), so a drafter that is not being used
  still shows when it would pay. The record is kept per *bucket*, a confidence class
  the drafter puts on each draft. A ``CopyBucket`` (the n-gram drafter's: how long its
  match is and whether its previous copy held) starts from ``copy_prior``, what a copy
  that has agreed for L tokens does next, worth up to ``copy_strength`` observations:
  a deep match drafts long from its first sight, a shallow one does not until its own
  record says so. The prior's misses are scaled by the request's *miss ratio*
  (``copy_miss_ratio``): how often this request's copies missed against how often the
  prior expected them to, over every copy proposal whatever its bucket. A request that
  rewrites a given function copies for long and learns so within a few proposals; one
  that answers in its own words bets less on its next match. Any other bucket's
  estimate at each position is shrunk towards the lower of its own previous position's
  and what all proposals say there, so a new bucket starts from the drafter's record
  and moves to its own. Either way it is lowered by ``caution`` standard errors of its
  evidence, so one lucky proposal does not buy a long draft;
* the drafter's own cost per proposed token.

Expected tokens per round with k drafts is ``E(k) = 1 + S(1) + … + S(k)``, with S(j)
the chance that the first j drafts are all kept (the target's own token always
counts), so it picks ``argmax_k E(k) / (draft(k) + t(k + 1))``
over k = 0 … k_max, and k = 0 (plain decoding) unless the best k promises
``required_gain`` more: when drafts do not pay, it stops drafting, and speculation is
never knowingly slower. Until plain decoding's cost ``t(1)`` is measured it does not
draft. The first three proposals are asked for ``k_start`` tokens whatever the
estimates say, to measure the drafter's cost; the first, which also pays for its setup
(an index, a prefill), is then forgotten. A drafter that costs next to nothing (n-gram
lookup) is asked for ``k_max`` tokens; a costly one (a draft model) for the best k over
all its proposals. Either way the draft is then cut to the best k for its bucket
(``trim``): drafting is paid for by then, verifying is not. Every ``explore_every``
rounds it tries one size more than its choice when that is predicted within 10% of it,
so that the measured curve around the choice stays fresh. A costly drafter is also
tried every ``probe_every`` rounds regardless: at k = 0 it proposes nothing, so it would
never hear that its drafts have come to pay. A cheap one needs no such probe: its
proposals are scored whether or not they are verified, and a probe in text where
drafts never pay cost about one token in 32.

Requests verified together in one forward (the collective engine's batches) are cut
together (``trim_together``, ``batch_lengths``): the curve is then per forward, whatever
its requests, and the forward's draft tokens are those with the best chances across every
request, as many as pay for the forward they make dearer. A step reaches at most twice the
largest size or step measured (``reach``): at batch 4 every request's confident copy once made
one forward over 196 tokens, guessed at 3.2 s and timed at 7.0 s. Within that doubling a
batch's curve is priced as one request's is, at half the top's average cost per token: an
optimistic guess, on purpose. Priced by the curve's last measured stretch instead, a
batch of 4 on this CPU, whose forwards cost 160 ms over 4 tokens, 300 over 8 and 400 over
16 (llama.cpp's kernel from 8 rows on costs little more per row), took 16 tokens for
600 ms from the stretch 4 to 8, so drafts whose every token held 0.9 to 0.95 of the time
never went past 8, where measured they gained 1.37-1.63x over plain decoding (a scripted
model on those costs; in ``docs/bench/collective`` run I drafted almost nothing). A
guess too low costs one forward, after which the measurement prices that size, and each
doubling is tried only where drafts would pay at the guess: on a curve that stays
linear, where no draft pays, a batch of copies that held tried 16, 32, 64 and 128 tokens
once each, then decoded plainly (a scripted test).

A batch's cut is priced by the points measured among the latest ``refresh_every``
forwards, a point measured only before them left out (``CostCurve.fresh``); ``reach``
still counts every size ever measured. Priced by every point, a size measured in a slow
minute kept that price: it looked dear, so it was not drafted, so not measured again, and
every configuration run after the one that measured it inherited it (on the tune half,
+majority after single:ngram inherited 16 tokens at 502 ms, where four price tables of
this session timed 350-438). Left out, the size is priced by the guess again and tried
where that pays. The cost, on the linear curve above: copies that held go on trying one
forward of about 50 tokens and one of about 200 every ``refresh_every`` forwards; copies
whose tokens hold 0.9 of the time, one of 12.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol

from coinfer.decoding.batch_shape import Passes, batch_lengths, evened, shaped_price
from coinfer.decoding.cost_curve import CostCurve, priced, within_measured
from coinfer.decoding.ledger import ProposalLedger
from coinfer.errors import ConfigError

if TYPE_CHECKING:
    from coinfer.decoding.drafters import Draft

__all__ = [
    "AdaptiveDraftLength",
    "CopyBucket",
    "CostCurve",
    "DraftLength",
    "DraftSizer",
    "FixedDraftLength",
    "ProposalLedger",
    "batch_lengths",
    "copy_prior",
    "priced",
    "within_measured",
]


class CopyBucket(NamedTuple):
    """The bucket of a draft copied from earlier text (prompt lookup): ``match`` tokens
    before the copied continuation equal the context's last ones, and ``warm``, whether
    the drafter's previous copy held. It carries its own prior (``copy_prior``)."""

    match: int
    warm: bool


def copy_prior(match: int, position: int, miss: float = 1.0) -> float:
    """Before any evidence, the chance that draft position ``position`` of a copy whose
    earlier positions held holds too: ``1 - miss / L``, where ``L = match + position - 1``
    tokens of the copied passage agree so far. A copy that has agreed for long goes on;
    a one-token coincidence mostly does not. On the broad suite's tune split the n-gram
    drafter's copies went on 0.20 of the time at L = 1, 0.69 at 4, 0.86 at 8 and 0.99 past
    16 (``miss`` 0.8 fits that); ``AdaptiveDraftLength`` takes 1.0, a little below, so a
    middling match in prose bets less before its bucket has a record. A server's batch
    takes 0.8 in its steps of two or more requests (``batch_speculation.BATCH_COPY_MISS``),
    where it measured faster."""
    return max(0.0, 1.0 - miss / max(1, match + position - 1))


class DraftLength(Protocol):
    """Chooses k before a round and learns from what rounds cost and what drafts would keep."""

    def next_k(self) -> int:
        """How many tokens to ask the drafter for."""
        ...

    def trim(self, proposed: int, bucket: Hashable) -> int:
        """How many of the ``proposed`` tokens, drafted with confidence ``bucket``, to verify."""
        ...

    def trim_together(
        self, proposals: Sequence[tuple[int, Hashable]], passes: Passes | None = None
    ) -> list[int]:
        """``trim`` for drafts verified in one step: (tokens proposed, bucket) per request;
        ``passes``: how the backend runs a step by the rows each request brings (None: one
        forward, whatever its shape; ``batch_shape``)."""
        ...

    def evened(self, rows: Sequence[int], passes: Passes) -> int | None:
        """The rows every request of a step should bring, where that is cheaper than the
        ``rows`` each brings (``batch_shape.evened``); None: run it as it is."""
        ...

    def observe(
        self, *, drafted: int, draft_s: float, verify_s: float, proposed: int = 0,
        passes: Sequence[int] | None = None,
    ) -> None:  # fmt: skip
        """A round's costs: ``proposed`` tokens drafted in ``draft_s``, ``drafted`` of them
        verified; ``passes``: the rows of each pass its verification ran as (None: one)."""
        ...

    def learn(self, *, bucket: Hashable, position: int, kept: bool) -> None:
        """Draft position ``position`` (1-based) of a proposal in ``bucket`` whose earlier
        positions all equal what the target produced: did this one too?"""
        ...


@dataclass
class FixedDraftLength:
    """Always the same k."""

    k: int

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ConfigError(f"draft_tokens must be >= 0, got {self.k}")

    def next_k(self) -> int:
        return self.k

    def trim(self, proposed: int, bucket: Hashable) -> int:
        return proposed

    def trim_together(
        self, proposals: Sequence[tuple[int, Hashable]], passes: Passes | None = None
    ) -> list[int]:
        return [n for n, _ in proposals]

    def evened(self, rows: Sequence[int], passes: Passes) -> int | None:
        return None

    def observe(
        self, *, drafted: int, draft_s: float, verify_s: float, proposed: int = 0,
        passes: Sequence[int] | None = None,
    ) -> None:  # fmt: skip
        return None

    def learn(self, *, bucket: Hashable, position: int, kept: bool) -> None:
        return None


@dataclass
class _Survival:
    """Decayed counts, per draft position j, of proposals that reached j and that kept j.

    ``tries[j]``: proposals at least j long whose first j - 1 tokens matched, once the
    target's j-th token is known; ``passes[j]``: those whose j-th token matched too.
    Their ratio is the chance that a draft that got this far goes one token further.
    """

    size: int
    tries: list[float] = field(default_factory=list)
    passes: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tries = [0.0] * (self.size + 1)
        self.passes = [0.0] * (self.size + 1)

    def add(self, position: int, kept: bool, memory: float) -> None:
        if position == 1:  # a new proposal: older ones count a little less
            self.tries = [memory * t for t in self.tries]
            self.passes = [memory * p for p in self.passes]
        if position <= self.size:
            self.tries[position] += 1
            self.passes[position] += kept


@dataclass
class AdaptiveDraftLength:
    """Pick k to maximise expected tokens per second from measured costs and acceptance."""

    k_max: int = 48
    k_start: int = 4
    smoothing: float = 0.3  # weight of a new measurement in the moving averages
    explore_every: int = 8
    probe_every: int = 32  # a costly drafter's exploration round even when it looks hopeless
    memory: float = 0.95  # decay of past acceptance evidence per proposal
    prior_strength: float = 1.0  # proposals' worth of the prior estimate at each position
    cheap_fraction: float = 0.05  # drafting k_max tokens under this share of t(1) is "free"
    caution: float = 0.5  # standard errors taken off each bucket estimate
    required_gain: float = 1.05  # draft only when it promises this much more than plain decoding
    copy_strength: float = 4.0  # observations a copy bucket's prior is worth in its estimate
    copy_confidence: float = 16.0  # most observations caution credits a copy bucket's prior with
    copy_miss: float = 1.0  # copy_prior's miss in a step of one request
    # copy_prior's miss in a step of two or more requests (None: copy_miss; a server's batch:
    # BATCH_COPY_MISS); a step's width is the latest ``trim_together``'s
    batch_copy_miss: float | None = None
    copy_ratio_strength: float = 2.0  # expected misses the neutral miss ratio (1) is worth
    copy_ratio_caution: float = 1.0  # standard deviations added to the miss ratio
    copy_ratio_floor: float = 0.5  # least miss ratio: copies miss at least half as often as the prior says
    batch_floor: float = 0.0  # in a batch's forward, the least share of its plain rate each request keeps
    reach: float = 2.0  # a batch's step over at most this many times the largest size or step measured
    refresh_every: int = 64  # forwards after which plain decoding's point is measured again (``CostCurve``)
    # the target's cost curve, n -> seconds of a forward over n tokens: pass one shared by
    # every request on the same target (``target_costs``) and each starts knowing it
    costs: dict[int, float] = field(default_factory=CostCurve)
    _draft_per_token: float | None = None  # seconds per proposed token
    _draft_samples: int = 0  # proposals that measured it
    _overall: _Survival = field(init=False)  # every proposal, whatever its bucket
    _buckets: dict[Hashable, _Survival] = field(default_factory=dict)
    _rounds: int = 0
    _copy_misses: float = 0.0  # this request's copy positions that missed (decayed like the records)
    _copy_expected: float = 0.0  # the misses copy_prior expected at those positions
    _width: int = 1  # requests in the latest step (``trim_together``): the step its drafts are learned from
    _widest: int = 0  # the most rows a measured step brought, in one forward or several passes

    def __post_init__(self) -> None:
        if not 0 <= self.k_start <= self.k_max or not 0 < self.smoothing <= 1 or self.explore_every < 1:
            raise ConfigError("need 0 <= k_start <= k_max, 0 < smoothing <= 1 and explore_every >= 1")
        self._overall = _Survival(self.k_max)

    def _continuation(self, bucket: Hashable | None, upto: int | None = None) -> list[float]:
        """Chance of draft position j being kept given j - 1 were, for j = 0 … k_max (or
        ``upto``: a batch's round asks only as far as each draft goes).

        All proposals together (``bucket`` None): each position shrunk towards the
        previous position's estimate (1/2 for the first), so positions never reached
        inherit what is known. A bucket: each position shrunk towards what all proposals
        say there, so a new bucket starts from the drafter's record so far (while copying,
        a longer match is as good as the shorter ones before it) and moves to its own.
        """
        last = self.k_max if upto is None else min(upto, self.k_max)
        if bucket is None:
            return self._shrunk(self._overall, None, last)
        record = self._buckets.get(bucket)
        if isinstance(bucket, CopyBucket):
            return self._copy_continuation(bucket.match, record, last)
        return self._cautious(self._shrunk(record, self._shrunk(self._overall, None, last), last), record)

    def _copy_continuation(self, match: int, record: _Survival | None, last: int) -> list[float]:
        """A copy bucket's own evidence over ``copy_prior`` (its misses scaled by the
        request's ``copy_miss_ratio``), worth as many observations as the tokens that agree
        so far (up to ``copy_strength``), then made cautious."""
        ratio, miss, out = self.copy_miss_ratio(), self.step_copy_miss(), [1.0]
        for j in range(1, last + 1):
            agreed = match + j - 1
            strength = min(self.copy_strength, agreed)
            prior = max(0.0, 1.0 - ratio * (1.0 - copy_prior(match, j, miss)))
            t, p = (record.tries[j], record.passes[j]) if record else (0.0, 0.0)
            c = (p + strength * prior) / (t + strength)
            n = t + min(self.copy_confidence, agreed)
            out.append(max(0.0, c - self.caution * math.sqrt(c * (1 - c) / n)))
        return out

    def step_copy_miss(self) -> float:
        """``copy_prior``'s miss for the step at hand: ``batch_copy_miss`` where the latest
        step had two or more requests and it is set, else ``copy_miss``."""
        if self._width >= 2 and self.batch_copy_miss is not None:
            return self.batch_copy_miss
        return self.copy_miss

    def copy_miss_ratio(self) -> float:
        """How often this request's copies missed against how often ``copy_prior`` expected
        them to: the posterior mean of a Gamma prior (mean 1, worth ``copy_ratio_strength``
        expected misses) over Poisson counts, plus ``copy_ratio_caution`` standard
        deviations, never under ``copy_ratio_floor``. Above 1 the request's copies fail more
        often than copies usually do; it starts above 1 (nothing seen yet, all caution)."""
        a = self.copy_ratio_strength
        mean = (self._copy_misses + a) / (self._copy_expected + a)
        sd = math.sqrt(self._copy_misses + a) / (self._copy_expected + a)
        return max(self.copy_ratio_floor, mean + self.copy_ratio_caution * sd)

    def _shrunk(self, record: _Survival | None, towards: list[float] | None, last: int) -> list[float]:
        out, previous = [1.0], 0.5 if towards is None else 1.0
        for j in range(1, last + 1):
            prior = previous if towards is None else min(previous, towards[j])
            t, p = (record.tries[j], record.passes[j]) if record else (0.0, 0.0)
            previous = (p + self.prior_strength * prior) / (t + self.prior_strength)
            out.append(previous)
        return out

    def _cautious(self, estimates: list[float], record: _Survival | None) -> list[float]:
        """Each estimate lowered by ``caution`` standard errors of its evidence: a bucket
        that held once is not trusted like one that held ten times."""
        out = [1.0]
        for j in range(1, len(estimates)):
            c, n = estimates[j], self.prior_strength + (record.tries[j] if record else 0.0)
            out.append(max(0.0, c - self.caution * math.sqrt(c * (1 - c) / n)))
        return out

    def survival(self, bucket: Hashable | None = None, upto: int | None = None) -> list[float]:
        """P(the first j draft tokens are all kept), j = 0 … k_max (position 0: always 1),
        or j = 0 … ``upto``."""
        out, s = [1.0], 1.0
        for c in self._continuation(bucket, upto)[1:]:
            s *= c
            out.append(s)
        return out

    def acceptance(self, bucket: Hashable | None = None) -> float:
        """Estimated chance that a draft's first token is kept."""
        return self.survival(bucket)[1]

    def verify_cost(self, n: int) -> float | None:
        """Estimated seconds of one target forward over n tokens (None before any measurement)."""
        return self._cost(n) if self.costs else None

    def _cost(self, n: int) -> float:
        """``verify_cost`` once at least one size is measured."""
        return priced(self.costs, n)

    def expected_tokens(self, k: int, bucket: Hashable | None = None) -> float:
        """Tokens a round yields with k drafts: the target's own one plus the kept prefix."""
        return self._expected(bucket)[k]

    def _expected(self, bucket: Hashable | None) -> list[float]:
        """``expected_tokens`` for every k = 0 … k_max at once (running sums of the survival)."""
        out, total = [], 0.0
        for s in self.survival(bucket):
            total += s
            out.append(total)
        return out

    def _draft_cost_per_token(self) -> float:
        return 0.0 if self.drafter_is_cheap() else (self._draft_per_token or 0.0)

    def tokens_per_second(self, k: int, bucket: Hashable | None = None) -> float | None:
        return self._rates(self._expected(bucket))[k] if self.costs else None

    def _rates(self, expected: list[float]) -> list[float]:
        """Expected tokens per second for every k = 0 … k_max, given ``expected`` tokens per
        round (once at least one size is measured)."""
        draft = self._draft_cost_per_token()
        return [expected[k] / (self._cost(k + 1) + draft * k) for k in range(self.k_max + 1)]

    def best_k(self, bucket: Hashable | None = None) -> int:
        return self._best(self._rates(self._expected(bucket))) if self.costs else self.k_start

    def _best(self, rates: list[float]) -> int:
        """The fastest k, and 0 unless it promises ``required_gain`` over plain decoding:
        a marginal gain on estimates is a coin toss with a slower side."""
        best = max(range(self.k_max + 1), key=lambda k: (rates[k], -k))
        return best if rates[best] >= self.required_gain * rates[0] else 0

    def drafter_is_cheap(self) -> bool:
        """Whether proposing ``k_max`` tokens costs next to nothing next to one target forward."""
        t1 = self.verify_cost(1)  # a batch's forwards are over several tokens: the least measured
        d = self._draft_per_token
        return t1 is not None and d is not None and d * self.k_max <= self.cheap_fraction * t1

    def next_k(self) -> int:
        if self._draft_samples < 3:  # until proposals show what drafting costs (the first pays for setup)
            return self.k_start
        if self.drafter_is_cheap():
            return self.k_max
        return self._choose(None)

    def trim(self, proposed: int, bucket: Hashable) -> int:
        return min(proposed, self._choose(bucket))  # drafting is paid for by now; verifying is not

    def trim_together(
        self, proposals: Sequence[tuple[int, Hashable]], passes: Passes | None = None
    ) -> list[int]:
        """How many of each request's proposed tokens to verify when every request is
        verified in one step, from (tokens proposed, bucket) per request (``batch_lengths``
        over this policy's cost curve, which is then per forward, whatever its requests;
        with ``passes``, a step is priced as its passes, ragged or evened, whichever is
        cheaper: ``batch_shape.shaped_price``). Drafting is paid for by now; nothing is
        verified before the curve has a measurement, and no step goes past ``reach`` times
        the largest size or step measured (``_pricing``, ``batch_lengths``' ``most``): what
        a forward costs is learned a doubling at a time, not bet on."""
        self._width = len(proposals)
        plain = [len(proposals)] if passes is None else passes([1] * len(proposals))
        if not self.costs or any(self._stale(n) for n in plain):
            return [0] * len(proposals)
        survivals = [self.survival(bucket, upto=n)[1:] if n else [] for n, bucket in proposals]
        explore = bool(self._rounds) and self._rounds % self.explore_every == 0
        cost, most = self._pricing()
        return batch_lengths(
            survivals,
            cost,
            required_gain=self.required_gain,
            explore=explore,
            floor=self.batch_floor,
            most=most,
            price=None if passes is None else lambda rows: shaped_price(rows, passes, cost, most),
        )

    def evened(self, rows: Sequence[int], passes: Passes) -> int | None:
        if not self.costs:
            return None
        cost, most = self._pricing()
        return evened(rows, passes, cost, most)

    def _pricing(self) -> tuple[Callable[[int], float], int]:
        """A batch's prices: the fresh curve (``_fresh``), and the most tokens a step may
        bring, ``reach`` times every size or step measured, however long ago. The step: a
        plain step of 8 requests whose streams were not consecutive ran as passes of 3 and
        5, and with 10 the most, nothing was ever verified, so nothing larger measured."""
        curve = self._fresh()
        return (lambda n: priced(curve, n)), int(self.reach * max(max(self.costs), self._widest))

    def _fresh(self) -> dict[int, float]:
        """The curve a batch's cut is priced by: the points measured within the latest
        ``refresh_every`` forwards (``CostCurve.fresh``), a point measured only before them
        left out, so priced between its fresher neighbours or past the top. Not by their
        floors: plain decoding's point is measured far more often than a draft size's, and
        the least of many measurements is lower than the least of few, so every draft
        looked dearer than it was (on the tune half's followup, two runs each, priced
        1.25-1.26x and 1.15x for single:ngram and +majority, against 1.27-1.34x and
        1.23-1.29x by the moving averages)."""
        if not isinstance(self.costs, CostCurve):
            return dict(self.costs)
        return self.costs.fresh(within=self.refresh_every + 1) or dict(self.costs)

    def _choose(self, bucket: Hashable | None) -> int:
        if 1 not in self.costs or self._stale(1):  # every gain is against plain decoding, measured first
            return 0
        rates = self._rates(self._expected(bucket))
        best = self._best(rates)
        if not self._rounds or best >= self.k_max:
            return best
        if self._rounds % self.probe_every == 0 and not self.drafter_is_cheap():
            return best + 1  # a costly drafter proposes nothing at k = 0, so it hears nothing either
        if self._rounds % self.explore_every == 0 and rates[best + 1] >= 0.9 * rates[best]:
            return best + 1  # only where it might pay
        return best

    def observe(
        self, *, drafted: int, draft_s: float, verify_s: float, proposed: int = 0,
        passes: Sequence[int] | None = None,
    ) -> None:  # fmt: skip
        self._rounds += 1
        self._widest = max(self._widest, drafted + 1)
        for n, seconds in self._apportioned(passes or [drafted + 1], verify_s):
            if isinstance(self.costs, CostCurve):
                self.costs.record(n, seconds, self.smoothing, self.refresh_every)
            else:
                self.costs[n] = self._average(self.costs.get(n), seconds)
        proposed = max(proposed, drafted)
        if proposed:  # the first proposal also paid for the drafter's setup: the second replaces it
            old = None if self._draft_samples == 1 else self._draft_per_token
            self._draft_per_token = self._average(old, draft_s / proposed)
            self._draft_samples += 1

    def _apportioned(self, passes: Sequence[int], seconds: float) -> list[tuple[int, float]]:
        """A step's ``seconds`` shared among its ``passes`` (rows each) as the curve prices
        them, or by rows before it prices anything: the curve stays one forward's price."""
        if len(passes) == 1:
            return [(passes[0], seconds)]
        curve = self._fresh() if self.costs else {}
        weights = [priced(curve, n) if curve else float(n) for n in passes]
        total = sum(weights)
        return [(n, seconds * w / total) for n, w in zip(passes, weights, strict=True)]

    def _stale(self, n: int) -> bool:
        """Whether plain decoding's point for ``n`` requests wants measuring again."""
        return isinstance(self.costs, CostCurve) and self.costs.stale(n, self.refresh_every)

    def _average(self, old: float | None, new: float) -> float:
        """Exponential moving average; the first measurement stands alone."""
        return new if old is None else (1 - self.smoothing) * old + self.smoothing * new

    def learn(self, *, bucket: Hashable, position: int, kept: bool) -> None:
        # recent proposals count more: n-gram drafts come in bursts (copied code, then prose)
        self._overall.add(position, kept, self.memory)
        self._buckets.setdefault(bucket, _Survival(self.k_max)).add(position, kept, self.memory)
        if isinstance(bucket, CopyBucket):
            self._score_copy(bucket.match, position, kept)

    def _score_copy(self, match: int, position: int, kept: bool) -> None:
        """Count one copy position towards the request's ``copy_miss_ratio``."""
        if position == 1:  # a new proposal: older ones count a little less
            self._copy_misses *= self.memory
            self._copy_expected *= self.memory
        self._copy_misses += not kept
        self._copy_expected += 1.0 - copy_prior(match, position, self.step_copy_miss())


class DraftSizer:
    """A draft-length policy fed by a ``ProposalLedger`` per request (key).

    Before a request's drafter proposes, ``learn`` scores that request's earlier proposals
    against its context as it now stands; ``cut`` records the new proposal, untrimmed,
    and cuts it to the length its bucket has earned (``DraftLength.trim``). The speculative
    loop sizes its one drafter this way; the collective engine each drafter that calls
    no model. Safe to use from a drafting and a verifying thread at once.
    """

    def __init__(self, policy: DraftLength) -> None:
        self.policy = policy
        self._ledgers: dict[int, ProposalLedger] = {}
        self._lock = threading.Lock()

    def learn(self, key: int, context: Sequence[int]) -> None:
        ledger = self._ledgers.setdefault(key, ProposalLedger())
        with self._lock:
            for bucket, position, kept in ledger.resolve(context):
                self.policy.learn(bucket=bucket, position=position, kept=kept)

    def cut(self, key: int, at: int, draft: Draft) -> Draft:
        """``draft`` (proposed at context length ``at``) cut to what its bucket has earned."""
        self._ledgers.setdefault(key, ProposalLedger()).add(at, draft.tokens, draft.bucket)
        if not draft.tokens:
            return draft
        with self._lock:
            return draft.head(self.policy.trim(len(draft.tokens), draft.bucket))

    def cut_together(
        self, proposals: Sequence[tuple[int, int, Draft]], others: int = 0, passes: Passes | None = None
    ) -> list[Draft]:
        """Drafts (key, context length, draft) verified in one step, each cut so that the
        step's tokens are the ones worth their cost together (``trim_together``);
        ``others``: the step's requests with no draft from this drafter, after these in the
        rows ``passes`` takes."""
        for key, at, draft in proposals:
            self._ledgers.setdefault(key, ProposalLedger()).add(at, draft.tokens, draft.bucket)
        rows: list[tuple[int, Hashable]] = [(len(d.tokens), d.bucket) for _, _, d in proposals]
        with self._lock:
            keep = self.policy.trim_together(rows + [(0, None)] * others, passes)
        return [d.head(k) for (_, _, d), k in zip(proposals, keep[: len(proposals)], strict=True)]

    def evened(self, rows: Sequence[int], passes: Passes) -> int | None:
        """``DraftLength.evened``: the rows each request of the step should bring, or None."""
        with self._lock:
            return self.policy.evened(rows, passes)

    def next_k(self) -> int:
        with self._lock:
            return self.policy.next_k()

    def observe(
        self, *, drafted: int, draft_s: float, verify_s: float, proposed: int = 0,
        passes: Sequence[int] | None = None,
    ) -> None:  # fmt: skip
        with self._lock:
            self.policy.observe(
                drafted=drafted, draft_s=draft_s, verify_s=verify_s, proposed=proposed, passes=passes
            )

    def forget(self, key: int) -> None:
        self._ledgers.pop(key, None)
