"""Lossless verification of a drafted chain against the target's distributions.

``speculative_accept`` is the rejection rule of Leviathan et al. (2023) and Chen et al.
(2023): draft token ``d_i`` drawn from ``q_i`` is kept with probability
``min(1, p_i(d_i) / q_i(d_i))``; at the first rejection the next token is drawn from
``norm(max(0, p_i - q_i))``; if every draft token is kept, a bonus token is drawn from
``p_{k+1}``. The output then has exactly the target's distribution. A deterministic
drafter (n-grams, a greedy draft model) has one-hot ``q``. With a greedy target every
``p`` is one-hot and the rule reduces to ``greedy_accept``: keep the longest prefix that
equals the target's argmax.

``accept_tree`` verifies a deterministic token *tree* (LLMCad, SpecInfer) the coupled way:
from the context, the target chooses each next token (greedy, or sampled with that
position's draw) and the walk descends into the child holding it, so the text is the
target's own whichever branches the tree holds.

``coupled_accept`` is the same rule for deterministic drafts, drawn the other way round:
the target samples each position with that position's own uniform draw, and a draft
token is kept iff it equals that sample. It keeps ``d_i`` with probability ``p_i(d_i)``
and otherwise yields a sample of ``p_i`` without ``d_i``, exactly as the rejection rule
does, but the text is a function of the seed alone (see ``sampling.PositionDraws``).
``sampled_choices`` is that rule with one generator's draws in turn, one per token output,
as plain sampling makes them: a served batch's sampling request (``chat.drafting``) then
writes what plain sampling draws from the same seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.models.tree import TokenTree

__all__ = [
    "accept_choices",
    "accept_deterministic",
    "accept_tree",
    "coupled_accept",
    "greedy_accept",
    "sampled_choices",
    "speculative_accept",
]


def greedy_accept(draft: Sequence[int], target_probs: np.ndarray) -> tuple[int, int]:
    """(accepted count, next token) for a greedy target.

    ``target_probs`` (k + 1, vocab): row i is the target's distribution after the first i
    draft tokens (or its logits: only the argmax matters). The next token is the target's
    choice after the accepted prefix.
    """
    return accept_choices(draft, np.argmax(target_probs, axis=-1))


def accept_choices(draft: Sequence[int], choices: Sequence[int] | np.ndarray) -> tuple[int, int]:
    """(accepted count, next token) given the target's greedy choice at each of the k + 1
    positions (``SteerableModel.extend_greedy``): the longest agreeing prefix, then the
    target's own token."""
    n = 0
    while n < len(draft) and int(draft[n]) == int(choices[n]):
        n += 1
    return n, int(choices[n])


def coupled_accept(
    draft: Sequence[int], target_probs: np.ndarray, uniforms: Sequence[float]
) -> tuple[int, int]:
    """(accepted count, next token) for a deterministic draft: position i's token is
    ``sample_at(target_probs[i], uniforms[i])``; drafts are kept while they equal it."""
    for i, token in enumerate(int(t) for t in draft):
        chosen = sample_at(target_probs[i], uniforms[i])
        if chosen != token:
            return i, chosen
    return len(draft), sample_at(target_probs[len(draft)], uniforms[len(draft)])


def sampled_choices(
    draft: Sequence[int], rows: np.ndarray, sampling: SamplingParams, draws: PositionDraws, at: int
) -> list[int]:
    """The target's sampled tokens along a deterministic draft, as far as they agree with
    it: row i's logits (row 0 predicting position ``at``) sampled with the uniform of
    position ``at + i``, until a sample differs from ``draft[i]`` or the draft ends (so
    the last entry is the target's own token). The uniforms are the positions' own, as
    plain sampling draws them: the text is the one plain decoding samples from the same
    seed, and each draft token is kept with the target's probability of it
    (``coupled_accept``, lazily: no row past the first disagreement is turned into a
    distribution)."""
    out: list[int] = []
    for i in range(len(draft) + 1):
        out.append(sample_at(probs_from_logits(rows[i], sampling), draws.uniform(at + i)))
        if i == len(draft) or out[-1] != int(draft[i]):
            break
    return out


def accept_deterministic(
    draft: Sequence[int], rows: np.ndarray, sampling: SamplingParams, draws: PositionDraws, at: int
) -> tuple[int, int]:
    """(accepted count, next token) for a draft that carries no distributions, verified by
    the target's logits ``rows`` (k + 1, vocab), row 0 predicting position ``at``: greedy,
    or coupled to the per-position draws, so the output is the target's own text."""
    if sampling.greedy:
        return greedy_accept(draft, rows)  # the argmax of the logits is the greedy choice
    out = sampled_choices(draft, rows, sampling, draws, at)
    return len(out) - 1, out[-1]


def accept_tree(
    tree: TokenTree, rows: np.ndarray, sampling: SamplingParams, draws: PositionDraws, at: int
) -> tuple[list[int], int]:
    """(accepted nodes root first, the target's next token) for a tree whose tokens carry no
    distributions.

    ``rows`` (len(tree) + 1, vocab): the target's logits from one forward over
    ``tree.verify_inputs(pending)``: row 0 after the context, row i + 1 after node i; row 0
    predicts position ``at``. Greedy, ``rows`` may be each row's argmax (len(tree) + 1,)
    instead: a GPU then reads back one id per row, not a vocabulary of logits. Siblings hold
    distinct tokens (a trie), so the walk is one path.
    """
    children = tree.children()
    level = [i for i, p in enumerate(tree.parents) if p < 0]
    path: list[int] = []
    row = 0
    while True:
        logits = rows[row]
        if sampling.greedy:
            choice = int(logits) if rows.ndim == 1 else int(np.argmax(logits))
        else:
            choice = sample_at(probs_from_logits(logits, sampling), draws.uniform(at + len(path)))
        node = next((c for c in level if tree.tokens[c] == choice), None)
        if node is None:
            return path, choice
        path.append(node)
        level, row = children[node], node + 1


def speculative_accept(
    draft: Sequence[int],
    draft_probs: np.ndarray | None,
    target_probs: np.ndarray,
    rng: np.random.Generator,
) -> tuple[int, int]:
    """(accepted count, next token) by rejection sampling; the output follows ``target_probs``.

    ``draft_probs`` (k, vocab): the distribution each draft token was drawn from, or None
    when the drafter is deterministic (one-hot). ``target_probs`` (k + 1, vocab).
    """
    for i, token in enumerate(int(t) for t in draft):
        p = target_probs[i]
        q_token = 1.0 if draft_probs is None else float(draft_probs[i, token])
        if q_token > 0 and rng.random() < min(1.0, float(p[token]) / q_token):
            continue
        residual = _residual(p, None if draft_probs is None else draft_probs[i], token)
        return i, int(rng.choice(residual.size, p=residual))
    bonus = target_probs[len(draft)]
    return len(draft), int(rng.choice(bonus.size, p=bonus))


def _residual(p: np.ndarray, q: np.ndarray | None, token: int) -> np.ndarray:
    """norm(max(0, p - q)); q one-hot at ``token`` when None (Leviathan et al., Alg. 1)."""
    if q is None:
        r = p.copy()
        r[token] = 0.0
    else:
        r = np.maximum(p - q, 0.0)
    total = r.sum()
    if total <= 0:  # p == q: a rejection has probability 0; keep p for numerical safety
        return p
    return r / total
