"""The speculative loop: a drafter proposes, the target verifies in one forward.

Each round sends ``[pending] + draft`` to the target, where ``pending`` is the last
token the target chose and is not yet in its cache. Row i of the returned logits is the
target's distribution after the first i draft tokens, so one forward over k + 1 tokens
verifies k drafts and yields one more token (the correction or the bonus). Rejected
tokens are rolled back with ``truncate``. With ``k = 0`` a round is plain decoding.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Hashable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.draft_length import DraftLength, FixedDraftLength
from coinfer.decoding.drafters import Draft, Drafter
from coinfer.decoding.generate import GenerationStats, Response, check_prompt
from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.decoding.verify import coupled_accept, greedy_accept, speculative_accept
from coinfer.errors import ConfigError
from coinfer.models.base import Seq, SteerableModel

__all__ = [
    "ProposalLedger",
    "Round",
    "SpecConfig",
    "SpecStats",
    "accept_deterministic",
    "emit_tokens",
    "speculative_generate",
    "stream_speculative",
]


@dataclass(frozen=True)
class SpecConfig:
    """Knobs of the loop; ``draft_tokens`` is a fixed k or a policy that chooses k each round."""

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_tokens: int | DraftLength = 4

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be at least 1, got {self.max_tokens}")
        if isinstance(self.draft_tokens, int):
            FixedDraftLength(self.draft_tokens)  # validates

    def policy(self) -> DraftLength:
        k = self.draft_tokens
        return FixedDraftLength(k) if isinstance(k, int) else k


@dataclass
class SpecStats:
    """The metrics every engine reports."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    target_forwards: int = 0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per target forward: 1 + accepted / rounds (the bonus token included)."""
        return 1.0 + self.accepted / self.rounds if self.rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def add(self, r: Round) -> None:
        self.target_forwards += 1
        if self.target_forwards > 1:  # the first forward is the prefill, not a verification
            self.rounds += 1
            self.drafted += r.drafted
            self.accepted += r.accepted

    def as_dict(self) -> dict[str, float | int]:
        return {
            "mean_accepted_length": round(self.mean_accepted_length, 3),
            "acceptance_rate": round(self.acceptance_rate, 3),
            "target_forwards": self.target_forwards,
            "drafted": self.drafted,
            "accepted": self.accepted,
        }


@dataclass(frozen=True)
class Round:
    """One verification round: the tokens it added and what it cost."""

    tokens: list[int]
    drafted: int
    accepted: int
    draft_s: float
    verify_s: float
    finished: str | None = None  # "stop" or "length" on the last round


def speculative_generate(
    target: SteerableModel,
    drafter: Drafter,
    prompt: Sequence[int],
    config: SpecConfig = SpecConfig(),  # noqa: B008  (frozen, so a shared default is safe)
) -> Iterator[Round]:
    """Yield rounds until an end-of-generation token or ``max_tokens``.

    The output follows the target's distribution exactly (greedy: equals the target
    alone); end-of-generation tokens are not included in ``Round.tokens``. The first
    round is the prefill and carries the first token.
    """
    check_prompt(target, prompt)
    draws = PositionDraws(config.sampling.seed)
    rng = np.random.default_rng(draws.seed)  # for sampled drafts, whose rejection rule draws afresh
    policy = config.policy()
    seq = target.new_sequence()
    try:
        t0 = time.perf_counter()
        logits = target.extend(seq, list(prompt), last_only=True)[-1]
        first = sample_at(probs_from_logits(logits, config.sampling), draws.uniform(len(prompt)))
        context, produced = list(prompt), 0
        new, drafted, n_acc, draft_s, verify_s = [first], 0, 0, 0.0, time.perf_counter() - t0
        ledger = ProposalLedger()
        while True:
            kept, finished = emit_tokens(new, target.eos_ids, config.max_tokens - produced)
            context.extend(kept)
            produced += len(kept)
            for bucket, position, held in ledger.resolve(context):
                policy.learn(bucket=bucket, position=position, kept=held)
            if not finished and len(context) + 1 >= target.n_ctx:
                finished = "length"
            yield Round(kept, drafted, n_acc, draft_s, verify_s, finished)
            if finished:
                return
            room = min(config.max_tokens - produced - 1, target.n_ctx - len(context))
            t0 = time.perf_counter()
            proposal = drafter.propose(context, max(0, min(policy.next_k(), room)))
            ledger.add(len(context), proposal.tokens, proposal.bucket)
            draft = proposal.head(policy.trim(len(proposal.tokens), proposal.bucket))
            t1 = time.perf_counter()
            n_acc, nxt = _verify(target, seq, context, draft, config.sampling, draws, rng)
            target.truncate(seq, len(context) + n_acc)  # keep pending + accepted drafts
            drafter.feedback(n_acc)
            drafted, draft_s, verify_s = len(draft.tokens), t1 - t0, time.perf_counter() - t1
            policy.observe(drafted=drafted, draft_s=draft_s, verify_s=verify_s, proposed=len(proposal.tokens))
            new = [*draft.tokens[:n_acc], nxt]
    finally:
        target.release(seq)


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
    (accepted count, next token)."""
    rows = target.extend(seq, [context[-1], *draft.tokens])  # (k + 1, vocab)
    if draft.probs is None or sampling.greedy:
        return accept_deterministic(draft.tokens, rows, sampling, draws, len(context))
    probs = np.stack([probs_from_logits(r, sampling) for r in rows])
    return speculative_accept(draft.tokens, draft.probs, probs, rng)  # seeded text follows draft lengths


def accept_deterministic(
    draft: Sequence[int], rows: np.ndarray, sampling: SamplingParams, draws: PositionDraws, at: int
) -> tuple[int, int]:
    """(accepted count, next token) for a draft that carries no distributions, verified by
    the target's logits ``rows`` (k + 1, vocab), row 0 predicting position ``at``: greedy,
    or coupled to the per-position draws, so the output is the target's own text."""
    if sampling.greedy:
        return greedy_accept(draft, rows)  # the argmax of the logits is the greedy choice
    probs = np.stack([probs_from_logits(r, sampling) for r in rows])
    return coupled_accept(draft, probs, [draws.uniform(at + i) for i in range(len(rows))])


class ProposalLedger:
    """Proposals being scored, token by token, against what the target goes on to produce.

    A proposal made at context length ``at`` is scored at each position as soon as the
    target's token there is known, until it first differs or ends; the part trimmed off
    before verification is scored too, at no cost. Scoring as tokens arrive (rather
    than once a proposal is decided) keeps long proposals from being learned late.
    """

    def __init__(self) -> None:
        self._open: list[_Proposal] = []

    def add(self, at: int, tokens: list[int], bucket: Hashable) -> None:
        if tokens:
            self._open.append(_Proposal(at, list(tokens), bucket))

    def resolve(self, context: Sequence[int]) -> list[tuple[Hashable, int, bool]]:
        """(bucket, position, kept) for every proposal position the context now decides."""
        events: list[tuple[Hashable, int, bool]] = []
        still = []
        for p in self._open:
            known = min(len(p.tokens), len(context) - p.at)
            missed = False
            while p.scored < known and not missed:
                missed = context[p.at + p.scored] != p.tokens[p.scored]
                p.scored += 1
                events.append((p.bucket, p.scored, not missed))
            if not missed and p.scored < len(p.tokens):
                still.append(p)
        self._open = still
        return events


@dataclass
class _Proposal:
    at: int  # context length when it was proposed
    tokens: list[int]
    bucket: Hashable
    scored: int = 0  # positions compared so far


def emit_tokens(new: list[int], eos_ids: frozenset[int], budget: int) -> tuple[list[int], str | None]:
    """The decided tokens to output, and why generation ends here (or None)."""
    for i, token in enumerate(new[:budget]):
        if token in eos_ids:
            return new[:i], "stop"
    if len(new) >= budget:
        return new[:budget], "length"
    return new, None


def stream_speculative(
    target: SteerableModel,
    drafter: Drafter,
    prompt: Sequence[int],
    config: SpecConfig = SpecConfig(),  # noqa: B008
) -> Generator[Response, None, None]:
    """``stream_generate``'s responses, one per round, with ``spec`` stats attached."""
    stats, spec = GenerationStats(prompt_tokens=len(prompt)), SpecStats()
    detok = IncrementalDetokenizer(target.detokenize)
    tokens: list[int] = []
    for r in speculative_generate(target, drafter, prompt, config):
        spec.add(r)
        text = ""
        for token in r.tokens:
            tokens.append(token)
            stats.token()
            text += detok.push(token)
        if r.finished:
            yield Response(text + detok.flush(), None, tokens, stats, r.finished, spec)
            return
        yield Response(text, r.tokens[-1] if r.tokens else None, tokens, stats, None, spec)
