"""Which draft sources draft this round: those whose drafts pay for themselves.

The paper runs each speculative model on its own GPU, so drafting costs the slowest
draft and verifying a few more tokens is nearly free. On a CPU the drafts share the
target's cores: every source's drafting adds to the round, and a verification over k + 1
tokens costs far more than one over 1 (``MODELS.md``). A draft model that holds 86% of
its tokens can still make decoding slower than no drafting at all.

``SourceGate`` keeps, online, for every source:

* its drafting cost per request (seconds; calls that set up a request the source has
  not seen, such as a draft model's prefill, are left out: they are paid once);
* how often it proposes a draft at all and how long (the n-gram source often has none);
* its per-token acceptance ``a``: of the draft tokens the target's output has decided,
  how many held (a draft that failed at its j-th token counts j - 1 held and 1 failed);

and, shared, the target's verification time per number of tokens in the batch ``V(n)``
(an average per n, interpolated between measured sizes, and proportional beyond them).

With ``b`` requests and speculation length ``s``, a source alone would give
``b (1 + p G) / (b c + V(b + b p L))`` tokens per second, with ``p`` its share of
requests with a draft, ``L`` their mean length and ``G = a + a² + … + a^L`` the tokens
expected to hold; plain decoding gives ``b / V(b)``. A source drafts for every request
while it beats plain decoding, and not at all once it does not. A source not yet
measured, and one that is off, *explores*: it drafts for one request (one it has already
set up, if any), and only while its exploring so far (its drafting, and once it is
measured the verification time its drafts may add), with this call's expected cost,
stays within ``explore_share`` of the decoding time since the first round, less what the
other sources that are off have spent of their equal parts of it. So all of them
together stay within that one budget (with a budget each, two draft models that do not
pay took twice the share from a run whose n-gram source alone was the fastest), a cheap
source leaves its part to the others, and one source's dear set-up does not hold back
another's measuring. The target's prefills of joining requests are left out of that
time, since they are not what drafts speed up (on long prompts, prefills were 40% of a
run's time, and counting them let exploring take 5-6% of the decoding). A call for a
request it has not set up is expected to cost its last set-up, or, before it has made
one and if it drafts with a model (``with_model``), what the target's prefill of a
prompt cost (a draft model reads the same prompt and is not meant to be bigger than the
target).
Exploring keeps a source's record fresh, so it comes back when the text turns its way.

What a gate measures outlives its run: the verification times and each source's record
(its cost, how often and how long it drafts, how often its drafts hold) are kept per
target (``gate_memory``) and a later run on it starts from them, by source name, so a
server's next batch or a benchmark's next configuration does not pay to learn again what
the last one measured. A source whose drafts could not pay even at the best acceptance
its whole record allows (two standard errors above what held; every token with no record) is
not explored on requests it has not set up: a draft model's set-up is a prefill of the
whole prompt, which no later draft of it would repay.

A source that sizes its own drafts (``sizes_own``: the n-gram source cuts each draft to
what its match depth has earned, down to nothing, and a batch's drafts together) is
always on: it already weighs what each draft adds to the forward, more finely than one
decision for all requests can.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coinfer.decoding.draft_length import within_measured
from coinfer.decoding.learned import Learned
from coinfer.errors import ConfigError

__all__ = ["GateConfig", "GateMemory", "SourceGate", "gate_memory"]


@dataclass(frozen=True)
class GateConfig:
    """``explore_share``: the most of the decoding time that the sources that are off spend
    exploring, all together;
    ``memory``: how much of the past each average keeps per new measurement;
    ``warmup``: measured drafting calls before a source may be turned on or off."""

    explore_share: float = 0.03
    memory: float = 0.9
    warmup: int = 2

    def __post_init__(self) -> None:
        if not 0.0 < self.explore_share <= 1.0 or not 0.0 <= self.memory < 1.0 or self.warmup < 1:
            raise ConfigError("need 0 < explore_share <= 1, 0 <= memory < 1 and warmup >= 1")


@dataclass
class _Record:
    """What one source's drafting has cost and given so far."""

    calls: int = 0  # measured drafting calls
    cost: float = 0.0  # seconds per request drafted for
    proposes: float = 1.0  # share of requests given a non-empty draft
    length: float = 0.0  # mean length of the non-empty drafts
    held: float = 0.0  # decayed count of draft tokens that held
    failed: float = 0.0  # decayed count of draft tokens that failed
    held_all: float = 0.0  # every draft token that held, not decayed: the whole record
    failed_all: float = 0.0
    on: bool = False
    explore_s: float = 0.0  # seconds spent drafting while off (measuring, exploring)
    setup_s: float = 0.0  # seconds of a call that set up a request (the latest)

    def acceptance(self) -> float:
        seen = self.held + self.failed
        return self.held / seen if seen else 0.0


@dataclass
class GateMemory:
    """What the gates on one target have measured: the verification time per number of
    tokens in the batch, and each source's record by name."""

    verify: dict[int, float] = field(default_factory=dict)
    sources: dict[str, _Record] = field(default_factory=dict)

    def clear(self) -> None:
        """Forget everything: the next run measures afresh."""
        self.verify.clear()
        self.sources.clear()


def gate_memory(target: Any, learned: Learned) -> GateMemory:
    """The gates' memory for ``target``, kept in ``learned`` (a session's)."""
    return learned.of(target, "gate-memory", GateMemory)


def _optimistic(rec: _Record) -> float:
    """The source's per-token acceptance two standard errors above its whole record (1 with
    no record): what its drafts might still hold if the text turned their way. Not the
    decayed record the gate switches on, which follows the text but, worth about ten
    drafts, never rules out a source that holds most of its tokens."""
    seen = rec.held_all + rec.failed_all
    if seen <= 0:
        return 1.0
    a = rec.held_all / seen
    return min(1.0, a + 2.0 * (a * (1.0 - a) / seen) ** 0.5 + 1.0 / seen)


class SourceGate:
    """Decides, per round, which requests each source drafts for (see the module)."""

    def __init__(
        self,
        n_sources: int,
        config: GateConfig = GateConfig(),  # noqa: B008 (frozen)
        with_model: Sequence[bool] | None = None,
        sizes_own: Sequence[bool] | None = None,
        *,
        names: Sequence[str] | None = None,
        memory: GateMemory | None = None,
    ) -> None:
        self.config = config
        self._with_model = list(with_model) if with_model is not None else [False] * n_sources
        self._sizes_own = list(sizes_own) if sizes_own is not None else [False] * n_sources
        if len(self._with_model) != n_sources or len(self._sizes_own) != n_sources:
            raise ConfigError(f"need {n_sources} with_model and sizes_own flags, one per source")
        if memory is not None and (names is None or len(names) != n_sources):
            raise ConfigError(f"a gate's memory needs {n_sources} source names")
        if memory is None or names is None:
            self._records = [_Record() for _ in range(n_sources)]
        else:  # a run starts from what the last one on this target measured, with nothing on
            self._records = [memory.sources.setdefault(name, _Record()) for name in names]
        for rec, own in zip(self._records, self._sizes_own, strict=True):
            rec.on, rec.explore_s = own, 0.0
        self._seen: list[set[int]] = [set() for _ in range(n_sources)]
        self._verify: dict[int, float] = memory.verify if memory is not None else {}  # batch tokens -> s
        self._lock = threading.Lock()
        self._started = 0.0  # the first plan's time
        self._prefill_s = 0.0  # the target's prefill per request: a draft's set-up until measured
        self._prefilling_s = 0.0  # the target's prefills since the first plan: not decoding time
        self.rounds_on = [0] * n_sources  # rounds in which each source drafted for every request
        self.rounds_explored = [0] * n_sources

    @property
    def on(self) -> list[bool]:
        return [r.on for r in self._records]

    @property
    def a_model_is_on(self) -> bool:
        """Whether any source that drafts with a model drafts for every request now."""
        return any(r.on and m for r, m in zip(self._records, self._with_model, strict=True))

    # ---- deciding -----------------------------------------------------------------------
    def plan(self, keys: Sequence[int], s: int) -> list[list[int]]:
        """For each source, the indexes of ``keys`` it drafts for this round."""
        with self._lock:
            now = time.perf_counter()
            self._started = self._started or now
            for rec, own in zip(self._records, self._sizes_own, strict=True):
                if rec.calls >= self.config.warmup and not own:
                    rec.on = self._pays(rec, len(keys), s)
            out: list[list[int]] = [[] for _ in self._records]
            for i, rec in enumerate(self._records):
                if rec.on:
                    self.rounds_on[i] += 1
                    out[i] = list(range(len(keys)))
            self._explore(out, keys, s, now)
            return out

    def _explore(self, out: list[list[int]], keys: Sequence[int], s: int, now: float) -> None:
        """Plan one request each for the sources that are off, each while its exploring
        stays within the one budget less what the others have spent of their equal parts
        (see the module)."""
        off = [i for i, rec in enumerate(self._records) if not rec.on]
        if not keys or not off:
            return
        budget = self.config.explore_share * (now - self._started - self._prefilling_s)
        charged = {i: min(self._records[i].explore_s, budget / len(off)) for i in off}
        total = sum(charged.values())
        for i in off:
            rec = self._records[i]
            known = [j for j, key in enumerate(keys) if key in self._seen[i]]
            if not known and self._hopeless(rec, len(keys), s):
                continue  # a set-up that no draft of it would repay
            prior = self._prefill_s if self._with_model[i] else 0.0
            price = rec.cost if known else (rec.setup_s or prior)
            if rec.explore_s + price <= budget - (total - charged[i]):
                self.rounds_explored[i] += 1
                out[i] = known[:1] or [0]

    def _pays(self, rec: _Record, b: int, s: int) -> bool:
        plain = self._verify_cost(b)
        length = min(float(s), rec.length)
        a = rec.acceptance()
        gain = sum(a**j for j in range(1, int(length) + 1)) + (length % 1) * a ** (int(length) + 1)
        if rec.proposes * gain <= 0.0:
            return False  # drafts that hold nothing add work and no tokens, whatever V says
        drafted = self._verify_cost(b + round(b * rec.proposes * length))
        if plain is None or drafted is None:
            return True  # the target's cost is not measured yet: measure it with drafts
        return b * (1.0 + rec.proposes * gain) / (b * rec.cost + drafted) > b / plain

    def _hopeless(self, rec: _Record, b: int, s: int) -> bool:
        """Whether the source, measured, would be slower than plain decoding at every
        length up to ``s`` even at the best acceptance its record allows (``_optimistic``)."""
        plain = self._verify_cost(b)
        if rec.calls < self.config.warmup or plain is None:
            return False
        a = _optimistic(rec)
        for length in range(1, max(1, s) + 1):
            drafted = self._verify_cost(b + b * length)
            gain = sum(a**j for j in range(1, length + 1))
            if drafted is None or b * (1 + gain) / (b * rec.cost + drafted) > b / plain:
                return False
        return True

    def _verify_cost(self, n: int) -> float | None:
        """V(n): measured, interpolated between measured sizes, or proportional beyond."""
        if not self._verify:
            return None
        inside = within_measured(self._verify, n)
        if inside is not None:
            return inside
        near = max(self._verify) if n > max(self._verify) else min(self._verify)
        return self._verify[near] * n / near

    def _extra_verify(self, n: int) -> float:
        """What verifying ``n`` more tokens adds to one request's verification."""
        one, more = self._verify_cost(1), self._verify_cost(1 + n)
        return max(0.0, more - one) if n and one is not None and more is not None else 0.0

    # ---- learning -----------------------------------------------------------------------
    def drafted(self, i: int, keys: Sequence[int], seconds: float, drafts: Sequence[Sequence[int]]) -> None:
        """Source ``i`` drafted ``drafts`` for ``keys`` in ``seconds``."""
        if not keys:
            return
        with self._lock:
            rec = self._records[i]
            new = any(key not in self._seen[i] for key in keys)
            self._seen[i].update(keys)
            if not rec.on:  # its drafting; once measured, also the verifying its drafts may add
                warm = rec.calls >= self.config.warmup
                rec.explore_s += seconds + (sum(self._extra_verify(len(d)) for d in drafts) if warm else 0.0)
            made = [len(d) for d in drafts if d]
            rec.proposes = self._average(rec.proposes, len(made) / len(keys), rec.calls)
            if made:
                rec.length = self._average(rec.length, sum(made) / len(made), rec.calls)
            if new:  # a set-up call (a prefill) is paid once per request
                rec.setup_s = seconds
            else:
                rec.cost = self._average(rec.cost, seconds / len(keys), rec.calls)
                rec.calls += 1

    def scored(self, i: int, draft_len: int, held: int, decided: int) -> None:
        """A draft of ``draft_len`` tokens from source ``i`` of which the first ``held``
        equal the target's output, of which ``decided`` tokens are known."""
        with self._lock:
            rec = self._records[i]
            m = self.config.memory
            failed = 1.0 if held < min(draft_len, decided) else 0.0
            rec.held, rec.failed = m * rec.held + held, m * rec.failed + failed
            rec.held_all, rec.failed_all = rec.held_all + held, rec.failed_all + failed

    def verified(self, n_tokens: int, seconds: float) -> None:
        """The target verified ``n_tokens`` tokens (all requests together) in ``seconds``."""
        with self._lock:
            old = self._verify.get(n_tokens)
            m = self.config.memory
            self._verify[n_tokens] = seconds if old is None else m * old + (1 - m) * seconds

    def prefilled(self, n_requests: int, seconds: float) -> None:
        """The target read ``n_requests`` prompts in ``seconds``."""
        with self._lock:
            self._prefill_s = seconds / max(1, n_requests)
            if self._started:
                self._prefilling_s += seconds

    def forget(self, key: int) -> None:
        """The request ``key`` is finished."""
        with self._lock:
            for seen in self._seen:
                seen.discard(key)

    def _average(self, old: float, new: float, count: int) -> float:
        if count == 0:
            return new
        m = min(self.config.memory, count / (count + 1))
        return m * old + (1 - m) * new
