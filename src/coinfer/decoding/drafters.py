"""Drafters: propose k tokens after a context, then learn how many were kept.

The two-method contract (``propose``, ``feedback``) is Hugging Face's
``CandidateGenerator`` shape; it fits model drafts, n-gram lookup and, later, early exit
and cross-tokenizer drafts. A ``Draft`` carries the distributions its tokens were drawn
from, or None when the drafter is deterministic (one-hot), which is what lossless
verification needs.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from coinfer.decoding.sampling import SamplingParams, probs_from_logits, sample
from coinfer.errors import ConfigError
from coinfer.models.base import Seq, SteerableModel

__all__ = ["Draft", "Drafter", "ModelDrafter", "NgramDrafter", "TextDrafter", "rewind_to"]


@dataclass(frozen=True)
class Draft:
    """Proposed tokens and, for a sampling drafter, their distributions (k, vocab).

    ``bucket`` is the drafter's confidence class for this draft, any hashable value (the
    n-gram drafter: how long the match it copied from is, and whether its previous
    proposal held); the draft-length policy learns acceptance per bucket. Drafters
    without such a signal leave it 0.
    """

    tokens: list[int]
    probs: np.ndarray | None = None
    bucket: Hashable = 0

    def head(self, k: int) -> Draft:
        """The first k tokens of this draft."""
        if k >= len(self.tokens):
            return self
        return Draft(self.tokens[:k], None if self.probs is None else self.probs[:k], self.bucket)


class Drafter(Protocol):
    """Anything that proposes continuations of a token context."""

    def propose(self, context: Sequence[int], k: int) -> Draft: ...

    def feedback(self, n_accepted: int) -> None: ...


class NgramDrafter:
    """Prompt lookup: continue the latest earlier occurrence of the context's last n-gram.

    Costs no model call. Tries n from ``max_n`` down to ``min_n``. The index holds, for
    every n-gram seen, where its latest continuation starts, and is extended
    incrementally as the context grows.

    The draft's bucket says how far to trust it, as ``(match, warm)``:

    * ``match``: how long the context's suffix equals the text before the copied
      continuation, counted back past ``max_n`` up to ``horizon`` tokens and graded
      1, 2, 3, 4, 5 (5–7), 8 (8–15), 16 (16–31), 32 (32 or more). Deep inside a copied
      passage the match is long; a coincidental match on a common phrase is short.
    * ``warm``: whether the first token of this drafter's previous proposal was the
      token that followed. Copying comes in runs: while it holds, short matches hold
      too; in freshly written text they mostly fail.

    Only a match of at least ``deep_match`` tokens may propose more than
    ``shallow_tokens``: on a CPU a forward over 48 tokens costs about ten plain ones,
    and a shallow match's record is too thin and too mixed to bet that much on.
    """

    GRADES = (32, 16, 8, 5, 4, 3, 2, 1)

    def __init__(
        self,
        *,
        min_n: int = 1,
        max_n: int = 8,
        horizon: int = 64,
        deep_match: int = 32,
        shallow_tokens: int = 16,
    ) -> None:
        if not 1 <= min_n <= max_n <= horizon:
            raise ConfigError(f"need 1 <= min_n <= max_n <= horizon, got {min_n}, {max_n}, {horizon}")
        if shallow_tokens < 1:
            raise ConfigError(f"shallow_tokens must be at least 1, got {shallow_tokens}")
        self.min_n, self.max_n, self.horizon = min_n, max_n, horizon
        self.deep_match, self.shallow_tokens = deep_match, shallow_tokens
        self._seen: list[int] = []
        self._next: dict[tuple[int, ...], int] = {}
        self._previous: tuple[int, int] | None = None  # (context length, first token) of the last proposal

    def _index(self, context: Sequence[int]) -> None:
        if context[: len(self._seen)] != self._seen:  # not an extension: start over
            self._seen, self._next, self._previous = [], {}, None
        for j in range(len(self._seen), len(context)):
            for n in range(self.min_n, self.max_n + 1):
                if j - n >= 0:
                    self._next[tuple(context[j - n : j])] = j
        self._seen = list(context)

    def propose(self, context: Sequence[int], k: int) -> Draft:
        context = list(context)
        self._index(context)
        warm = self._previous_held(context)
        self._previous = None
        if k <= 0:
            return Draft([])
        for n in range(min(self.max_n, len(context)), self.min_n - 1, -1):
            start = self._next.get(tuple(context[-n:]))
            if start is not None:
                match = self._match_length(context, start, n)
                if match < self.deep_match:
                    k = min(k, self.shallow_tokens)
                tokens = context[start : start + k]
                self._previous = (len(context), tokens[0])
                return Draft(tokens, bucket=(self._grade(match), warm))
        return Draft([])

    def _previous_held(self, context: list[int]) -> bool:
        if self._previous is None:
            return False
        at, token = self._previous
        return len(context) > at and context[at] == token

    def _match_length(self, context: list[int], start: int, n: int) -> int:
        """How many tokens before ``start`` equal the context's last ones (at least ``n``)."""
        end = len(context)
        while n < self.horizon and n < start and context[start - n - 1] == context[end - n - 1]:
            n += 1
        return n

    def _grade(self, length: int) -> int:
        return next(g for g in self.GRADES if length >= g)

    def feedback(self, n_accepted: int) -> None:
        return None


class ModelDrafter:
    """A smaller model with the target's vocabulary drafts token by token.

    Its own sequence follows the context: each ``propose`` keeps the common prefix with
    what it drafted before (the accepted tokens), rolls back the rest and extends the new
    tokens, so only new tokens cost a forward. ``sampling=None`` drafts greedily
    (deterministic, one-hot ``q``); otherwise tokens are sampled and their ``q`` returned.
    """

    def __init__(
        self,
        draft: SteerableModel,
        *,
        target: SteerableModel | None = None,
        sampling: SamplingParams | None = None,
    ) -> None:
        if target is not None:
            check_same_vocabulary(draft, target)
        self.model = draft
        self.sampling = sampling
        self._rng = np.random.default_rng(None if sampling is None else sampling.seed)
        self._seq = draft.new_sequence()

    def _sync(self, context: list[int]) -> np.ndarray:
        """Make the draft sequence hold ``context``; return the logits after it (vocab,)."""
        missing = rewind_to(self.model, self._seq, context)
        return self.model.extend(self._seq, missing, last_only=True)[-1]

    def propose(self, context: Sequence[int], k: int) -> Draft:
        if k <= 0:
            return Draft([])
        logits = self._sync(list(context))
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        for i in range(k):
            if self.sampling is None:
                tokens.append(int(np.argmax(logits)))
            else:
                q = probs_from_logits(logits, self.sampling)
                tokens.append(sample(q, self._rng))
                qs.append(q)
            if tokens[-1] in self.model.eos_ids:
                break
            if i < k - 1:
                logits = self.model.extend(self._seq, [tokens[-1]])[-1]
        return Draft(tokens, np.stack(qs) if qs else None)

    def feedback(self, n_accepted: int) -> None:
        return None  # the next propose() keeps the accepted prefix by itself

    def close(self) -> None:
        self.model.release(self._seq)


class TextDrafter:
    """A draft model with another tokenizer, bridged through text.

    The target's generated tokens become text, the draft continues that text after its
    own prompt (``draft_prompt``: the same request in the draft's own chat format), and
    its continuation is tokenized back with the target's tokenizer. Proposals are
    deterministic (greedy draft), so verification keeps the output lossless under greedy
    decoding and, with a one-hot ``q``, exactly the target's distribution under sampling.
    A proposal whose re-tokenization would change tokens already generated is dropped.
    """

    def __init__(
        self,
        draft: SteerableModel,
        target: SteerableModel,
        *,
        draft_prompt: Sequence[int],
        target_prompt_len: int,
        overshoot: int = 2,
    ) -> None:
        self.model, self.target = draft, target
        self.draft_prompt = list(draft_prompt)
        self.target_prompt_len = target_prompt_len
        self.overshoot = overshoot  # draft tokens beyond k: token boundaries rarely line up
        self._inner = ModelDrafter(draft)

    def propose(self, context: Sequence[int], k: int) -> Draft:
        if k <= 0:
            return Draft([])
        generated = list(context[self.target_prompt_len :])
        text = self.target.detokenize(generated)
        draft_context = self.draft_prompt + self.model.tokenize(text)
        drafted = self._inner.propose(draft_context, k + self.overshoot).tokens
        continuation = self.model.detokenize(drafted)
        retokenized = self.target.tokenize(text + continuation)
        if retokenized[: len(generated)] != generated:
            return Draft([])
        return Draft(retokenized[len(generated) : len(generated) + k])

    def feedback(self, n_accepted: int) -> None:
        return None

    def close(self) -> None:
        self._inner.close()


def rewind_to(model: SteerableModel, seq: Seq, context: list[int]) -> list[int]:
    """Roll ``seq`` back to its common prefix with ``context`` (the accepted tokens), always
    leaving at least the last token to re-read for fresh logits; the tokens still to extend."""
    have = seq.tokens
    common, limit = 0, min(len(have), len(context) - 1)
    while common < limit and have[common] == context[common]:
        common += 1
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
