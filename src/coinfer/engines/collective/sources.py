"""Draft sources: one kind of speculative model drafting for many requests at once.

A source proposes, for each request's context, up to ``k`` tokens in the target's
vocabulary. Drafts are deterministic (greedy), so verification stays lossless however
the drafts are chosen among (``verify.coupled_accept``).

* ``ModelSource``: a draft model with the target's vocabulary; each step extends every
  request's draft sequence by one token in one batch (``extend_many``), as the target
  verifies them in one batch.
* ``NgramSource``: prompt lookup, one ``NgramDrafter`` per request (no model call).
* ``TextSource``: a draft model with another tokenizer, through text, one
  ``TextDrafter`` per request (not batched: each request's text is re-tokenized).

``open_sources`` builds them from specs: ``ngram``, or a catalogue name or model path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from coinfer.decoding.draft_length import AdaptiveDraftLength
from coinfer.decoding.drafters import (
    Draft,
    Drafter,
    NgramDrafter,
    TextDrafter,
    check_same_vocabulary,
    rewind_to,
)
from coinfer.decoding.speculative import ProposalLedger
from coinfer.errors import ConfigError
from coinfer.models.base import Seq, SteerableModel

__all__ = ["DraftSource", "ModelSource", "NgramSource", "PerRequestSource", "TextSource", "open_sources"]


class DraftSource(Protocol):
    """Drafts for several requests, each known by a key that stays the same across rounds."""

    name: str

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[list[int]]:
        """Up to ``k`` tokens after each (key, context)."""
        ...

    def forget(self, key: int) -> None:
        """The request ``key`` is finished: free what was kept for it."""
        ...

    def close(self) -> None: ...


class PerRequestSource:
    """A source that keeps one ``Drafter`` per request, made by ``make(key)`` on the
    request's first round (``model``: the model it drafts with, if any)."""

    def __init__(self, name: str, make: Callable[[int], Drafter], model: SteerableModel | None = None):
        self.name = name
        self.model = model
        self._make = make
        self._drafters: dict[int, Drafter] = {}

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[list[int]]:
        return [self._drafter(key).propose(context, k).tokens if k > 0 else [] for key, context in contexts]

    def _drafter(self, key: int) -> Drafter:
        return self._drafters.get(key) or self._drafters.setdefault(key, self._make(key))

    def forget(self, key: int) -> None:
        drafter = self._drafters.pop(key, None)
        close = getattr(drafter, "close", None)
        if close is not None:
            close()

    def close(self) -> None:
        for key in list(self._drafters):
            self.forget(key)


class NgramSource(PerRequestSource):
    """Prompt lookup per request, each draft cut to the length that pays for its match.

    A lookup costs nothing, but verifying its tokens does, and how far a copy holds
    depends on how long the match it copies from is (``NgramDrafter``'s bucket). One
    ``AdaptiveDraftLength`` for all requests learns, per bucket, how far drafts hold
    (every proposal is scored, untrimmed, as the request's context grows) and, from
    ``observe``, what the target's forward costs per request; each draft of up to ``k``
    tokens is cut to the best length for its bucket. ``adaptive=False``: uncut drafts.
    """

    def __init__(self, name: str = "ngram", *, adaptive: bool = True) -> None:
        super().__init__(name, lambda _key: NgramDrafter())
        self.policy = AdaptiveDraftLength() if adaptive else None
        self._ledgers: dict[int, ProposalLedger] = {}
        self._lock = threading.Lock()  # the pipeline drafts and observes on two threads

    @property
    def sizes_own_drafts(self) -> bool:
        """Whether it cuts its own drafts (the source gate then leaves their length to it)."""
        return self.policy is not None

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[list[int]]:
        if self.policy is None:
            return super().propose_many(contexts, k)
        out = []
        for key, context in contexts:
            ledger = self._ledgers.setdefault(key, ProposalLedger())
            events = ledger.resolve(context)
            with self._lock:
                for bucket, position, kept in events:
                    self.policy.learn(bucket=bucket, position=position, kept=kept)
            draft = self._drafter(key).propose(context, k) if k > 0 else Draft([])
            ledger.add(len(context), draft.tokens, draft.bucket)
            with self._lock:
                keep = self.policy.trim(len(draft.tokens), draft.bucket) if draft.tokens else 0
            out.append(draft.tokens[:keep])
        return out

    def observe(self, drafted: int, seconds: float) -> None:
        """The target verified ``drafted`` draft tokens of one request (and its pending
        token) in ``seconds``: its batch's time over its requests."""
        if self.policy is not None:
            with self._lock:
                self.policy.observe(drafted=drafted, draft_s=0.0, verify_s=seconds)

    def forget(self, key: int) -> None:
        self._ledgers.pop(key, None)
        super().forget(key)


class ModelSource:
    """A same-vocabulary draft model, drafting greedily for every request in one batch
    per step. Each request keeps its own sequence, synced to its context by keeping the
    common prefix (the accepted tokens) and rolling back the rest."""

    def __init__(self, model: SteerableModel, name: str | None = None) -> None:
        self.model = model
        self.name = name or model.name
        self._seqs: dict[int, Seq] = {}

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[list[int]]:
        if k <= 0 or not contexts:
            return [[] for _ in contexts]
        items = []
        for key, context in contexts:
            seq = self._seqs.get(key) or self._seqs.setdefault(key, self.model.new_sequence())
            items.append((seq, rewind_to(self.model, seq, list(context))))
        logits = [rows[-1] for rows in self.model.extend_many(items, last_only=True)]
        drafts: list[list[int]] = [[] for _ in contexts]
        live = list(range(len(contexts)))
        for step in range(k):
            for i in live:
                drafts[i].append(int(np.argmax(logits[i])))
            live = [i for i in live if drafts[i][-1] not in self.model.eos_ids]
            if step == k - 1 or not live:
                break
            rows = self.model.extend_many([(items[i][0], [drafts[i][-1]]) for i in live])
            for i, r in zip(live, rows, strict=True):
                logits[i] = r[-1]
        return drafts

    def forget(self, key: int) -> None:
        seq = self._seqs.pop(key, None)
        if seq is not None:
            self.model.release(seq)

    def close(self) -> None:
        for key in list(self._seqs):
            self.forget(key)


class TextSource(PerRequestSource):
    """A draft model with another tokenizer: one ``TextDrafter`` per request. It needs
    each request's prompt twice: in the draft's own format (``draft_prompts``) and the
    length of the target's (``target_prompt_lens``), both by request key."""

    def __init__(
        self,
        model: SteerableModel,
        target: SteerableModel,
        draft_prompts: Sequence[Sequence[int]],
        target_prompt_lens: Sequence[int],
    ) -> None:
        def make(key: int) -> TextDrafter:
            return TextDrafter(
                model, target, draft_prompt=draft_prompts[key], target_prompt_len=target_prompt_lens[key]
            )

        super().__init__(model.name, make, model)


def open_sources(
    specs: Sequence[str],
    target: SteerableModel,
    *,
    load: Callable[[str], SteerableModel],
    draft_prompts: Callable[[SteerableModel], Sequence[Sequence[int]]],
    target_prompt_lens: Sequence[int],
) -> list[DraftSource]:
    """Draft sources from specs: ``ngram``, or a model ``load`` can open. A model with the
    target's vocabulary drafts in batches (``ModelSource``); another drafts through text
    (``TextSource``), reading each request's prompt as ``draft_prompts(model)`` gives it."""
    sources: list[DraftSource] = []
    for spec in specs:
        if spec == "ngram":
            sources.append(NgramSource())
            continue
        model = load(spec)
        try:
            check_same_vocabulary(model, target)
        except ConfigError:
            sources.append(TextSource(model, target, draft_prompts(model), target_prompt_lens))
        else:
            sources.append(ModelSource(model, name=spec))
    return sources
