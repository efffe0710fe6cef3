"""Lossless acceptance: greedy prefix matching and Leviathan/Chen rejection sampling."""

from __future__ import annotations

import numpy as np
import pytest

from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.decoding.verify import (
    accept_deterministic,
    coupled_accept,
    greedy_accept,
    sampled_choices,
    speculative_accept,
)

CHI2_999 = {3: 16.27}  # 0.999 quantile of chi-square with 3 degrees of freedom


def _one_hot(rows: list[int], vocab: int = 4) -> np.ndarray:
    out = np.zeros((len(rows), vocab))
    out[np.arange(len(rows)), rows] = 1.0
    return out


def test_greedy_accept_keeps_the_matching_prefix_and_adds_the_targets_choice() -> None:
    target = _one_hot([2, 1, 3, 0])  # the target's choice after 0, 1, 2, 3 draft tokens
    assert greedy_accept([2, 1, 3], target) == (3, 0)  # all kept, bonus token
    assert greedy_accept([2, 0, 3], target) == (1, 1)  # second differs: corrected
    assert greedy_accept([1, 1, 3], target) == (0, 2)
    assert greedy_accept([], target[:1]) == (0, 2)  # no draft: plain decoding


def test_rejection_sampling_with_a_greedy_target_is_greedy_acceptance() -> None:
    rng = np.random.default_rng(0)
    target = _one_hot([2, 1, 3, 0])
    for draft in ([2, 1, 3], [2, 0, 3], [1, 1, 3]):
        assert speculative_accept(draft, None, target, rng) == greedy_accept(draft, target)


def _chi2(samples: np.ndarray, probs: np.ndarray) -> float:
    counts = np.bincount(samples, minlength=probs.size)
    expected = probs * samples.size
    mask = expected > 0
    assert counts[~mask].sum() == 0, "a token with zero target probability was produced"
    return float(((counts[mask] - expected[mask]) ** 2 / expected[mask]).sum())


@pytest.mark.parametrize("deterministic", [False, True])
def test_the_first_output_token_follows_the_target_distribution(deterministic: bool) -> None:
    """Whatever the draft proposes, the first emitted token is distributed as p_1 (chi-square)."""
    p = np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]])
    q = np.array([[0.4, 0.3, 0.2, 0.1], [0.1, 0.1, 0.1, 0.7]])
    rng = np.random.default_rng(1234)
    firsts = []
    for _ in range(20000):
        if deterministic:
            draft, q_used = [3, 0], None  # an n-gram style proposal
        else:
            draft, q_used = [int(rng.choice(4, p=q[0])), int(rng.choice(4, p=q[1]))], q
        n, nxt = speculative_accept(draft, q_used, p, rng)
        firsts.append(draft[0] if n >= 1 else nxt)
    assert _chi2(np.array(firsts), p[0]) < CHI2_999[3]


def test_the_second_output_token_follows_the_target_given_the_first() -> None:
    """Conditioned on the first token being the accepted draft, the next is distributed as p_2."""
    p = np.array([[0.5, 0.5, 0.0, 0.0], [0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]])
    q = np.array([[1.0, 0.0, 0.0, 0.0], [0.3, 0.3, 0.3, 0.1]])
    rng = np.random.default_rng(99)
    seconds = []
    for _ in range(40000):
        draft = [0, int(rng.choice(4, p=q[1]))]
        n, nxt = speculative_accept(draft, q, p, rng)
        if n >= 1:  # first token was 0 (drafted and kept): the second is draft[1] or nxt
            seconds.append(draft[1] if n >= 2 else nxt)
    assert _chi2(np.array(seconds), p[1]) < CHI2_999[3]


def test_coupled_acceptance_keeps_a_draft_as_often_as_rejection_and_emits_the_target() -> None:
    """Each position's token is the target's sample with that position's draw; the draft
    is kept iff it equals it: kept with probability p(d), the token distributed as p."""
    p = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]])
    rng = np.random.default_rng(5)
    firsts, seconds, kept = [], [], 0
    for _ in range(20000):
        u = rng.random(3)
        n, nxt = coupled_accept([3, 0], p, u)
        assert (
            nxt
            == [int(np.searchsorted(np.cumsum(row), x, side="right")) for row, x in zip(p, u, strict=True)][n]
        )
        firsts.append(3 if n >= 1 else nxt)
        kept += n >= 1
        if n >= 1:
            seconds.append(0 if n >= 2 else nxt)
    assert _chi2(np.array(firsts), p[0]) < CHI2_999[3]
    assert _chi2(np.array(seconds), p[1]) < CHI2_999[3]
    assert abs(kept / 20000 - p[0][3]) < 0.015
    assert coupled_accept([2, 1, 3], _one_hot([2, 1, 3, 0]), [0.5] * 4) == (3, 0)  # greedy: all kept


def test_sampled_choices_sample_each_position_as_plain_sampling_and_keep_drafts_by_the_target() -> None:
    """Along a draft, a batch's sampling request takes the target's samples while they
    agree with it: the same tokens, from the same seed, as plain sampling one token at a
    time (each position's own uniform), so a draft token is kept with the target's
    probability of it, and the seeded text does not depend on how the draft was cut."""
    p = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1], [0.25, 0.25, 0.25, 0.25]])
    rows, params = _logits_of(p), SamplingParams(temperature=1.0)
    kept = 0
    for seed in range(3000):
        draws = PositionDraws(seed)
        out = sampled_choices([3, 0], rows, params, draws, 40)
        assert out == [
            sample_at(probs_from_logits(rows[i], params), draws.uniform(40 + i)) for i in range(len(out))
        ]
        assert out[:-1] == [3, 0][: len(out) - 1] and (len(out) == 3 or out[-1] != [3, 0][len(out) - 1])
        if len(out) > 1:  # the next step starts where this one stopped: the same text
            assert sampled_choices([0], rows[1:], params, draws, 41)[0] == out[1]
        kept += out[0] == 3
    assert abs(kept / 3000 - p[0][3]) < 0.03
    draws = PositionDraws(1)
    assert sampled_choices([], rows, params, draws, 7) == [
        sample_at(probs_from_logits(rows[0], params), draws.uniform(7))
    ]
    out = sampled_choices([3, 0], rows, params, draws, 7)
    assert accept_deterministic([3, 0], rows, params, draws, 7) == (len(out) - 1, out[-1])


def _logits_of(probs: np.ndarray) -> np.ndarray:
    return np.log(np.maximum(probs, 1e-300))


def test_tree_acceptance_walks_the_targets_greedy_choices_through_the_tree() -> None:
    """Figure 8: the branch whose tokens the target would choose wins, whatever its place
    in the tree, and the target's own next token follows it."""
    from coinfer.decoding.sampling import PositionDraws, SamplingParams
    from coinfer.decoding.verify import accept_tree
    from coinfer.models.tree import TokenTree

    tree = TokenTree.of([1, 2, 3, 2, 0], [-1, 0, 0, -1, 3])  # 1 -> {2, 3}; 2 -> 0
    # rows: after the context, then after each node; the target's argmax per row
    choices = [1, 3, 0, 2, 0, 1]
    rows = _logits_of(_one_hot(choices))
    greedy = SamplingParams()
    assert accept_tree(tree, rows, greedy, PositionDraws(0), 10) == ([0, 2], 2)  # 1, 3, then its own 2
    rows = _logits_of(_one_hot([2, 0, 0, 0, 0, 3]))
    assert accept_tree(tree, rows, greedy, PositionDraws(0), 10) == ([3, 4], 3)  # the second root's branch
    assert accept_tree(tree, _logits_of(_one_hot([3] * 6)), greedy, PositionDraws(0), 10) == ([], 3)
    assert accept_tree(TokenTree.of([], []), rows[:1], greedy, PositionDraws(0), 10) == ([], 2)
    # greedy, each row's argmax alone does (what a GPU stage reads back)
    assert accept_tree(tree, np.array(choices), greedy, PositionDraws(0), 10) == ([0, 2], 2)
    assert accept_tree(tree, np.array([2, 0, 0, 0, 0, 3]), greedy, PositionDraws(0), 10) == ([3, 4], 3)


def test_tree_acceptance_when_sampling_emits_the_targets_own_draws() -> None:
    """Each token is the target's sample with its position's draw, whichever tokens the
    tree holds: the first two output tokens follow p (chi-square) and equal what the
    target alone draws from the same seed."""
    from coinfer.decoding.sampling import PositionDraws, SamplingParams, sample_at
    from coinfer.decoding.verify import accept_tree
    from coinfer.models.tree import TokenTree

    p0 = np.array([0.1, 0.2, 0.3, 0.4])
    p1 = {3: np.array([0.7, 0.1, 0.1, 0.1]), 2: np.array([0.25, 0.25, 0.25, 0.25])}
    tree = TokenTree.of([3, 2, 0], [-1, -1, 0])  # roots 3 and 2; 3 -> 0
    rows = _logits_of(np.stack([p0, p1[3], p1[2], np.full(4, 0.25)]))
    sampling = SamplingParams(temperature=1.0)
    firsts, seconds = [], []
    for seed in range(8000):
        draws = PositionDraws(seed)
        path, nxt = accept_tree(tree, rows, sampling, draws, 5)
        out = [tree.tokens[n] for n in path] + [nxt]
        alone = sample_at(p0, draws.uniform(5))
        assert out[0] == alone
        if out[0] in p1 and len(out) > 1:
            assert out[1] == sample_at(p1[out[0]], draws.uniform(6))
            if out[0] == 3:
                seconds.append(out[1])
        firsts.append(out[0])
    assert _chi2(np.array(firsts), p0) < CHI2_999[3]
    assert _chi2(np.array(seconds), p1[3]) < CHI2_999[3]
