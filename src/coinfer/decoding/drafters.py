"""The drafter contract: propose tokens after contexts, then learn what the target kept.

One contract for one request and for many (Hugging Face's ``CandidateGenerator`` shape,
made batch-aware): a drafter proposes up to k tokens after each of several requests'
contexts at once (``propose_many``; ``propose`` is the one-request case, key 0), and after
each verification hears what the target produced after the context (``feedback``). A
request is known by a key that stays the same across rounds; ``forget`` frees what the
drafter kept for a finished one. Model drafts (``ModelDrafter``), n-gram lookup
(``NgramDrafter``) and drafts through another tokenizer (``TextDrafter``) implement it.

A ``Draft`` carries the distributions its tokens were drawn from, or None when the
drafter is deterministic (one-hot), which is what lossless verification needs, and a
``bucket``: the drafter's confidence class for it, which draft-length policies learn per.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np

from coinfer.errors import ConfigError
from coinfer.models.base import Seq, SteerableModel

__all__ = ["Draft", "Drafter", "check_same_vocabulary", "common_prefix", "rewind_to"]


@dataclass(frozen=True)
class Draft:
    """Proposed tokens and, for a sampling drafter, their distributions (k, vocab).

    ``bucket`` is the drafter's confidence class for this draft, any hashable value (the
    n-gram drafter: how long the match it copied from is, and whether its previous
    proposal held). Drafters without such a signal leave it 0.
    """

    tokens: list[int]
    probs: np.ndarray | None = None
    bucket: Hashable = 0

    def head(self, k: int) -> Draft:
        """The first k tokens of this draft."""
        if k >= len(self.tokens):
            return self
        return Draft(self.tokens[:k], None if self.probs is None else self.probs[:k], self.bucket)


class Drafter(ABC):
    """Proposes continuations of token contexts for one request or many.

    ``model``: the model the drafter runs, or None when drafting calls no model (its cost
    is next to nothing, so engines may ask it for long drafts and cut them to what pays).
    """

    name: str = "drafter"
    model: SteerableModel | None = None

    def propose(self, context: Sequence[int], k: int) -> Draft:
        """Up to ``k`` tokens after ``context`` for a single request (key 0)."""
        return self.propose_many([(0, context)], k)[0]

    @abstractmethod
    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[Draft]:
        """Up to ``k`` tokens after each ``(key, context)``, in order."""

    def feedback(self, key: int, context: Sequence[int], kept: Sequence[int]) -> None:  # noqa: B027
        """The target produced ``kept`` after ``context`` for request ``key``: the draft
        tokens it accepted, then its own next token. Drafters that keep state per request
        learn from it; by default there is nothing to learn."""

    def forget(self, key: int) -> None:  # noqa: B027
        """The request ``key`` is finished: free what was kept for it."""

    def close(self) -> None:  # noqa: B027
        """Forget every request (the drafter's model, if any, belongs to the caller)."""


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share (slices compared in C: a context's
    shared prefix is hundreds of tokens and is asked for every round)."""
    x, y = list(a), list(b)
    lo, hi = 0, min(len(x), len(y))
    if x[:hi] == y[:hi]:
        return hi
    while lo < hi:  # the longest equal prefix, by halving: x[:lo] == y[:lo] and x[:hi + 1] != y[:hi + 1]
        mid = (lo + hi + 1) // 2
        if x[:mid] == y[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def rewind_to(model: SteerableModel, seq: Seq, context: list[int]) -> list[int]:
    """Roll ``seq`` back to its common prefix with ``context`` (the accepted tokens), always
    leaving at least the last token to re-read for fresh logits; the tokens still to extend."""
    common = min(common_prefix(seq.tokens, context), len(context) - 1)
    model.truncate(seq, common)
    return context[common:]


def check_same_vocabulary(draft: SteerableModel, target: SteerableModel) -> None:
    """A draft model must tokenize like the target, or its tokens mean other things."""
    probe = "def f(x):\n    return x * 2  # ünïcode 🙂"
    if draft.vocab_size != target.vocab_size or draft.tokenize(probe) != target.tokenize(probe):
        raise ConfigError(
            f"the draft's vocabulary ({draft.name}, {draft.vocab_size}) differs from the target's "
            f"({target.name}, {target.vocab_size})",
            hint="pick a draft of the same family (qwen2.5-coder-0.5b for qwen2.5-coder-1.5b), "
            "or use --draft ngram",
        )
