"""Drafters that run a smaller model: one with the target's vocabulary (``ModelDrafter``),
or one with another tokenizer, bridged through text (``TextDrafter``); and
``open_drafter``, which builds the right drafter for a spec."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from coinfer.decoding.drafters import Draft, Drafter, check_same_vocabulary, common_prefix, rewind_to
from coinfer.decoding.heads_drafter import HEADS_PREFIX, open_heads_drafter
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.sampling import SamplingParams, probs_from_logits, sample
from coinfer.errors import ConfigError
from coinfer.models.base import Seq, SteerableModel

__all__ = ["ModelDrafter", "TextDrafter", "open_drafter"]


class ModelDrafter(Drafter):
    """A smaller model with the target's vocabulary drafts token by token, for every
    request in one batch per step (``extend_many``).

    Each request keeps its own sequence of the draft model, synced to its context at each
    ``propose`` by keeping the common prefix (the accepted tokens) and rolling back the
    rest, so only new tokens cost a forward; ``feedback`` rolls back at once what the
    target rejected. ``sampling=None`` drafts greedily (deterministic, one-hot ``q``);
    otherwise tokens are sampled and their ``q`` returned.
    """

    def __init__(
        self,
        draft: SteerableModel,
        *,
        target: SteerableModel | None = None,
        sampling: SamplingParams | None = None,
        name: str | None = None,
    ) -> None:
        if target is not None:
            check_same_vocabulary(draft, target)
        self.model: SteerableModel = draft
        self.name = name or draft.name
        self.sampling = sampling
        self._rng = np.random.default_rng(None if sampling is None else sampling.seed)
        self._seqs: dict[int, Seq] = {}

    def _seq(self, key: int) -> Seq:
        return self._seqs.get(key) or self._seqs.setdefault(key, self.model.new_sequence())

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[Draft]:
        if k <= 0 or not contexts:
            return [Draft([]) for _ in contexts]
        seqs = [self._seq(key) for key, _ in contexts]
        items = [
            (seq, rewind_to(self.model, seq, list(c))) for seq, (_, c) in zip(seqs, contexts, strict=True)
        ]
        if self.sampling is None:
            return [Draft(t) for t in self._greedy_steps(seqs, items, k)]
        logits = [rows[-1] for rows in self.model.extend_many(items, last_only=True)]
        tokens: list[list[int]] = [[] for _ in contexts]
        qs: list[list[np.ndarray]] = [[] for _ in contexts]
        live = list(range(len(contexts)))
        for step in range(k):
            for i in live:
                self._pick(logits[i], tokens[i], qs[i])
            live = [i for i in live if tokens[i][-1] not in self.model.eos_ids]
            if step == k - 1 or not live:
                break
            rows = self.model.extend_many([(seqs[i], [tokens[i][-1]]) for i in live])
            for i, r in zip(live, rows, strict=True):
                logits[i] = r[-1]
        return [Draft(t, np.stack(q) if q else None) for t, q in zip(tokens, qs, strict=True)]

    def _greedy_steps(self, seqs: list[Seq], items: list[tuple[Seq, list[int]]], k: int) -> list[list[int]]:
        """Greedy drafting: each step reads back one token per sequence, not its logits."""
        choices = self.model.extend_many_greedy(items)
        tokens = [[int(c)] for c in choices]
        live = [i for i, t in enumerate(tokens) if t[-1] not in self.model.eos_ids]
        for _ in range(k - 1):
            if not live:
                break
            choices = self.model.extend_many_greedy([(seqs[i], [tokens[i][-1]]) for i in live])
            for i, c in zip(live, choices, strict=True):
                tokens[i].append(int(c))
            live = [i for i in live if tokens[i][-1] not in self.model.eos_ids]
        return tokens

    def _pick(self, logits: np.ndarray, tokens: list[int], qs: list[np.ndarray]) -> None:
        """The next draft token after ``logits``, sampled, with its distribution."""
        assert self.sampling is not None
        q = probs_from_logits(logits, self.sampling)
        tokens.append(sample(q, self._rng))
        qs.append(q)

    def feedback(self, key: int, context: Sequence[int], kept: Sequence[int]) -> None:
        """Roll the request's sequence back to where it first differs from what the target
        produced (a sequence that runs on past it, along it, is left alone)."""
        seq = self._seqs.get(key)
        if seq is None:
            return
        decided = [*context, *kept]
        common = common_prefix(seq.tokens, decided)
        if common < min(len(seq.tokens), len(decided)):
            self.model.truncate(seq, common)

    def forget(self, key: int) -> None:
        seq = self._seqs.pop(key, None)
        if seq is not None:
            self.model.release(seq)

    def close(self) -> None:
        for key in list(self._seqs):
            self.forget(key)


class TextDrafter(Drafter):
    """A draft model with another tokenizer, bridged through text.

    A request's generated tokens become text, the draft continues that text after its
    own prompt (``draft_prompts[key]``: the same request in the draft's own chat format),
    and its continuation is tokenized back with the target's tokenizer;
    ``target_prompt_lens[key]`` says where the target's prompt ends in the context.
    Proposals are deterministic (greedy draft), so verification keeps the output lossless.
    A proposal whose re-tokenization would change tokens already generated is dropped.
    Every request drafts in one batch per step (``ModelDrafter``). It learns nothing from
    ``feedback``: the next proposal re-reads the request's text and rolls the draft
    model's cache back to it.
    """

    def __init__(
        self,
        draft: SteerableModel,
        target: SteerableModel,
        *,
        draft_prompts: Sequence[Sequence[int]],
        target_prompt_lens: Sequence[int],
        overshoot: int = 2,
    ) -> None:
        if len(draft_prompts) != len(target_prompt_lens):
            raise ConfigError("TextDrafter needs one draft prompt and one target prompt length per request")
        self.model: SteerableModel = draft
        self.name = draft.name
        self.target = target
        self.draft_prompts = [list(p) for p in draft_prompts]
        self.target_prompt_lens = list(target_prompt_lens)
        self.overshoot = overshoot  # draft tokens beyond k: token boundaries rarely line up
        self._inner = ModelDrafter(draft)

    def _texts(self, key: int, context: Sequence[int]) -> tuple[list[int], str, list[int]]:
        """The request's generated tokens, their text, and the draft model's context for them."""
        generated = list(context[self.target_prompt_lens[key] :])
        text = self.target.detokenize(generated)
        return generated, text, self.draft_prompts[key] + self.model.tokenize(text)

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[Draft]:
        if k <= 0 or not contexts:
            return [Draft([]) for _ in contexts]
        texts = [self._texts(key, context) for key, context in contexts]
        inner = [
            (key, draft_context) for (key, _), (_, _, draft_context) in zip(contexts, texts, strict=True)
        ]
        drafted = self._inner.propose_many(inner, k + self.overshoot)
        out = []
        for (generated, text, _), d in zip(texts, drafted, strict=True):
            retokenized = self.target.tokenize(text + self.model.detokenize(d.tokens))
            ok = retokenized[: len(generated)] == generated
            out.append(Draft(retokenized[len(generated) : len(generated) + k] if ok else []))
        return out

    def forget(self, key: int) -> None:
        self._inner.forget(key)

    def close(self) -> None:
        self._inner.close()


def open_drafter(
    spec: str,
    target: SteerableModel,
    *,
    load: Callable[[str], SteerableModel],
    draft_prompts: Callable[[SteerableModel], Sequence[Sequence[int]]],
    target_prompt_lens: Sequence[int],
) -> Drafter:
    """A drafter from a spec: ``ngram`` (or ``auto``, the drafter measured best on CPUs),
    ``heads:DIR`` (the target's own draft heads, ``HeadsDrafter``), or a model ``load``
    opens. A model with the target's vocabulary drafts tokens (``ModelDrafter``); another
    drafts through text (``TextDrafter``), reading each request's prompt as
    ``draft_prompts(model)`` gives it."""
    if spec in ("ngram", "auto"):
        return NgramDrafter()
    if spec.startswith(HEADS_PREFIX):
        return open_heads_drafter(spec, target)
    model = load(spec)
    try:
        check_same_vocabulary(model, target)
    except ConfigError:
        return TextDrafter(
            model, target, draft_prompts=draft_prompts(model), target_prompt_lens=target_prompt_lens
        )
    return ModelDrafter(model, name=spec)
