"""The speculative engine: a drafter proposes, the target verifies in one forward.

Three layers, as mlx-lm has them: ``generate_rounds`` yields one ``Round`` per target
forward, ``stream`` turns rounds into ``Response`` objects (text deltas, ``DecodeStats``),
``generate`` blocks and returns the whole text. With no drafter it is plain decoding.

Each round sends ``[pending] + draft`` to the target, where ``pending`` is the last token
the target chose and is not yet in its cache. Row i of the returned logits is the
target's distribution after the first i draft tokens, so one forward over k + 1 tokens
verifies k drafts and yields one more token (the correction or the bonus). Rejected
tokens are rolled back with ``truncate``; the drafter hears what the target kept. With
``draft_tokens="auto"`` the draft length is chosen each round from the target's measured
verification cost and how far drafts of each kind have held (``AdaptiveDraftLength``).
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from coinfer.decoding.draft_length import (
    AdaptiveDraftLength,
    CostCurve,
    DraftLength,
    DraftSizer,
    FixedDraftLength,
)
from coinfer.decoding.drafters import Draft, Drafter
from coinfer.decoding.learned import Learned, learned_or_new
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.prompting import as_prompt, check_prompt
from coinfer.decoding.response import Responder, Response, collect
from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.decoding.verify import accept_choices, accept_deterministic, speculative_accept
from coinfer.errors import ConfigError
from coinfer.models.base import Seq, SteerableModel

__all__ = [
    "PHASES",
    "Round",
    "SpecConfig",
    "emit_tokens",
    "generate",
    "generate_rounds",
    "stream",
    "take_round",
    "target_costs",
    "window_full",
    "window_room",
]

DraftSpec = Drafter | Literal["auto"] | None


@dataclass(frozen=True, kw_only=True)
class SpecConfig:
    """``draft_tokens``: a fixed k, or ``"auto"`` to choose k each round from measured costs
    and acceptance (0, plain decoding, when drafts do not pay); ``batch_floor``: served in
    a batch, the drafts are cut so that every request keeps this share of its plain rate
    (``decoding.batch_speculation``). 0 by default: the cut that gives the batch the most
    tokens per second, with the drafting gate keeping it from falling below plain batched
    decoding. In process, 8 requests at once on ``qwen2.5-coder-1.5b`` (one run each, this
    CPU), 0.97 drafted almost nothing and gave 0.97x and 0.96x plain batched decoding's
    throughput on the tune and held-out prompts, 0 gave 1.14x and 1.15x; a stream with
    nothing to copy then waits for the others' drafts (``docs/bench/serve``)."""

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_tokens: int | Literal["auto"] = "auto"
    batch_floor: float = 0.0

    def __post_init__(self) -> None:
        check_budget(self.max_tokens)
        check_draft_tokens(self.draft_tokens)
        if not 0.0 <= self.batch_floor <= 1.0:
            raise ConfigError(f"batch_floor must be within 0 and 1, got {self.batch_floor}")


def check_budget(max_tokens: int) -> None:
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ConfigError(
            f"max_tokens must be at least 1, got {max_tokens}", hint="pass --max-tokens N with N >= 1"
        )


def check_draft_tokens(value: object) -> None:
    """``draft_tokens`` means the same in every engine: a whole number >= 0, or ``"auto"``."""
    if value == "auto":
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigError(
            f"draft_tokens must be a whole number >= 0 or 'auto', got {value!r}",
            hint="pass --draft-tokens K or --draft-tokens auto",
        )


PHASES = ("draft", "forward", "logits", "accept", "policy")


@dataclass(frozen=True)
class Round:
    """One target forward (the first is the prefill): the tokens it added and where its
    time went, in seconds per phase: ``draft`` (the drafter, proposing and hearing what was
    kept), ``forward`` (the target's forward itself), ``logits`` (moving its output to
    Python), ``accept`` (the acceptance rule and the cache's rollback), ``policy`` (the
    draft-length policy's bookkeeping)."""

    tokens: list[int]
    drafted: int
    accepted: int
    phases: dict[str, float]
    finished: str | None = None  # "stop" or "length" on the last round


def target_costs(target: SteerableModel, learned: Learned) -> CostCurve:
    """The target's verification cost curve (n tokens -> seconds of one forward), shared by
    every request of one ``learned`` (a session's): each request's draft-length policy
    starts from what the ones before it measured instead of paying to measure it again."""
    return learned.of(target, "costs", CostCurve)


def _length_policy(config: SpecConfig, target: SteerableModel, learned: Learned) -> DraftLength:
    k = config.draft_tokens
    if k == "auto":
        return AdaptiveDraftLength(costs=target_costs(target, learned))
    return FixedDraftLength(int(k))


def generate_rounds(
    target: SteerableModel,
    prompt: Sequence[int],
    *,
    draft: Drafter | None,
    config: SpecConfig = SpecConfig(),  # noqa: B008  (frozen, so a shared default is safe)
    learned: Learned | None = None,
) -> Iterator[Round]:
    """Yield rounds until an end-of-generation token or ``max_tokens``.

    The output follows the target's distribution exactly (greedy: equals the target
    alone); end-of-generation tokens are not included in ``Round.tokens``. ``learned``:
    where the target's cost curve is kept (a session's; None: this call's alone).
    """
    check_prompt(target, prompt)
    draws = PositionDraws(config.sampling.seed)
    rng = np.random.default_rng(draws.seed)  # for sampled drafts, whose rejection rule draws afresh
    policy = (
        _length_policy(config, target, learned_or_new(learned)) if draft is not None else FixedDraftLength(0)
    )
    sizer = DraftSizer(policy)
    seq = target.new_sequence()
    try:
        r = _prefill(target, seq, prompt, config.sampling, draws)
        context, produced = list(prompt), 0
        while True:
            kept, finished = take_round(r.tokens, context, target, config.max_tokens - produced)
            produced += len(kept)
            yield Round(kept, r.drafted, r.accepted, r.phases, finished)
            if finished:
                return
            room = min(config.max_tokens - produced - 1, window_room(len(context), target.n_ctx))
            r = _round(target, seq, draft, sizer, context, room, config.sampling, draws, rng)
    finally:
        target.release(seq)
        if draft is not None:
            draft.forget(0)


def _prefill(
    target: SteerableModel, seq: Seq, prompt: Sequence[int], sampling: SamplingParams, draws: PositionDraws
) -> Round:
    """The target reads the prompt and chooses the first token."""
    t0, c0, l0 = time.perf_counter(), target.clock.compute_s, target.clock.logits_s
    logits = target.extend(seq, list(prompt), last_only=True)[-1]
    first = sample_at(probs_from_logits(logits, sampling), draws.uniform(len(prompt)))
    forward = target.clock.compute_s - c0 or time.perf_counter() - t0
    return Round([first], 0, 0, {"forward": forward, "logits": target.clock.logits_s - l0})


def _round(
    target: SteerableModel,
    seq: Seq,
    draft: Drafter | None,
    sizer: DraftSizer,
    context: list[int],
    room: int,
    sampling: SamplingParams,
    draws: PositionDraws,
    rng: np.random.Generator,
) -> Round:
    """Draft (cut to what pays), verify, roll back, tell the drafter: the round's new tokens.

    The policy's ``draft_s`` times the drafter alone: the length policy's own bookkeeping
    (tens of microseconds of Python) is not the drafter's cost, and counted as such it
    put n-gram lookup on the edge of the policy's "cheap drafter" threshold, where one
    noisy sample decided whether a request drafted at all."""
    clock = _PhaseClock(target)
    sizer.learn(0, context)
    k = max(0, min(sizer.next_k(), room))
    clock.lap("policy")
    proposal = Draft([]) if draft is None else draft.propose(context, k)
    draft_s = clock.lap("draft")
    d = sizer.cut(0, len(context), proposal)
    clock.lap("policy")
    n_acc, nxt = _verify(target, seq, context, d, sampling, draws, rng)
    target.truncate(seq, len(context) + n_acc)  # keep pending + accepted drafts
    verify_s = clock.lap("accept")
    new = [*d.tokens[:n_acc], nxt]
    if draft is not None:
        draft.feedback(0, context, new)
    clock.lap("draft")
    sizer.observe(drafted=len(d.tokens), draft_s=draft_s, verify_s=verify_s, proposed=len(proposal.tokens))
    clock.lap("policy")
    return Round(new, len(d.tokens), n_acc, clock.phases)


class _PhaseClock:
    """Splits a round's time into phases; the target's own clock separates its forward
    and the moving of its logits from the acceptance rule around them."""

    def __init__(self, target: SteerableModel) -> None:
        self.target, self.phases = target, dict.fromkeys(PHASES, 0.0)
        self.last = time.perf_counter()
        self.compute, self.logits = target.clock.compute_s, target.clock.logits_s

    def lap(self, phase: str) -> float:
        """Charge the time since the last lap to ``phase`` (the target's share of it to
        ``forward`` and ``logits``); the whole lap's seconds, the target's included."""
        now = time.perf_counter()
        lap, self.last = now - self.last, now
        clock = self.target.clock
        compute, logits = clock.compute_s - self.compute, clock.logits_s - self.logits
        self.compute, self.logits = clock.compute_s, clock.logits_s
        self.phases["forward"] += compute
        self.phases["logits"] += logits
        self.phases[phase] += max(0.0, lap - compute - logits)
        return lap


def _verify(
    target: SteerableModel,
    seq: Seq,
    context: Sequence[int],
    draft: Draft,
    sampling: SamplingParams,
    draws: PositionDraws,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """One target forward over the pending token (the context's last) and the draft:
    (accepted count, next token). Greedy verification needs only each row's argmax."""
    chain = [context[-1], *draft.tokens]
    if sampling.greedy:
        return accept_choices(draft.tokens, target.extend_greedy(seq, chain))
    rows = target.extend(seq, chain)  # (k + 1, vocab)
    if draft.probs is None:
        return accept_deterministic(draft.tokens, rows, sampling, draws, len(context))
    probs = np.stack([probs_from_logits(r, sampling) for r in rows])
    return speculative_accept(draft.tokens, draft.probs, probs, rng)  # seeded text follows draft lengths


def window_full(context_len: int, n_ctx: int) -> bool:
    """Whether a context (its last token pending, not yet in the cache) fills the window:
    a text is at most ``n_ctx`` tokens, prompt included."""
    return context_len >= n_ctx


def window_room(context_len: int, n_ctx: int) -> int:
    """How many draft tokens one verification may carry: the pending token and k drafts
    join the cache, and the target's own token after them must still fit the window."""
    return max(0, n_ctx - context_len - 1)


def take_round(
    new: list[int], context: list[int], target: SteerableModel, budget: int
) -> tuple[list[int], str | None]:
    """A round's tokens to output, appended to ``context`` (at most ``budget``, none past
    an end-of-generation token), and why generation ends here (or None): "stop", or
    "length" for the budget or a full context window."""
    kept, finished = emit_tokens(new, target.eos_ids, budget)
    context.extend(kept)
    if not finished and window_full(len(context), target.n_ctx):
        finished = "length"
    return kept, finished


def emit_tokens(new: list[int], eos_ids: frozenset[int], budget: int) -> tuple[list[int], str | None]:
    """The decided tokens to output, and why generation ends here (or None)."""
    for i, token in enumerate(new[:budget]):
        if token in eos_ids:
            return new[:i], "stop"
    if len(new) >= budget:
        return new[:budget], "length"
    return new, None


def stream(
    target: SteerableModel,
    prompt: str | Sequence[int],
    *,
    draft: DraftSpec = "auto",
    config: SpecConfig = SpecConfig(),  # noqa: B008
    learned: Learned | None = None,
) -> Generator[Response, None, None]:
    """One ``Response`` per round: the text it adds and the stats so far.

    ``prompt``: token ids, or a user's message (the model's chat template is applied).
    ``draft``: a drafter, ``"auto"`` (n-gram prompt lookup: what pays on CPUs), or None
    for plain decoding. A drafter passed in stays the caller's (this request is
    forgotten at the end); an ``"auto"`` one is closed here.
    """
    ids = as_prompt(target, prompt)
    drafter = NgramDrafter() if draft == "auto" else draft
    out = Responder(target.detokenize, prompt_tokens=len(ids), eos_ids=target.eos_ids)
    extras = {"draft": None if drafter is None else drafter.name}
    try:
        for r in generate_rounds(target, ids, draft=drafter, config=config, learned=learned):
            yield out.step(
                r.tokens, drafted=r.drafted, accepted=r.accepted, finish=r.finished, phases=r.phases,
                extras=dict(extras),
            )  # fmt: skip
    finally:
        if draft == "auto" and drafter is not None:
            drafter.close()


def generate(
    target: SteerableModel,
    prompt: str | Sequence[int],
    *,
    draft: DraftSpec = "auto",
    config: SpecConfig = SpecConfig(),  # noqa: B008
    learned: Learned | None = None,
) -> Response:
    """Generate to the end: one ``Response`` with the whole text and every token."""
    return collect(stream(target, prompt, draft=draft, config=config, learned=learned), target.detokenize)
