"""Token tree generation by the resident model (§3.2), on scripted distributions."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from coinfer.decoding.sampling import SamplingParams
from coinfer.engines.llmcad.tree_draft import TreeGrower
from coinfer.testing import EOS, ScriptedModel

A, B, C, X = ord("a"), ord("b"), ord("c"), ord("x")


def _draft(table: Mapping[tuple[int, ...], Mapping[int, float]], prompt_len: int) -> ScriptedModel:
    """A draft whose distribution after the prompt is ``table[tokens after the prompt]``
    ({X: 1.0} where the table says nothing)."""

    def dist(prefix: list[int]) -> Mapping[int, float]:
        return table.get(tuple(prefix[prompt_len:]), {X: 1.0})

    return ScriptedModel(dist, n_ctx=128, name="draft")


def _grower(draft: ScriptedModel, *, branch_confidence: float = 0.2, max_branches: int = 8) -> TreeGrower:
    return TreeGrower(
        draft, sampling=SamplingParams(), branch_confidence=branch_confidence, max_branches=max_branches
    )


def _paths(grower: TreeGrower) -> list[bytes]:
    tree = grower.tree()
    return sorted(bytes(tree.tokens[n] for n in b.nodes) for b in grower.branches)


def test_every_candidate_above_the_threshold_starts_a_branch() -> None:
    """After the pending token the draft says a 0.5, b 0.3, c 0.15, x 0.05: a and b are
    branches (threshold 0.2), c and x are not; each branch then grows by its own tokens."""
    prompt = list(b"p:")  # the last prompt token is the pending one
    table = {(): {A: 0.5, B: 0.3, C: 0.15, X: 0.05}, (A,): {A: 0.9, X: 0.1}, (B,): {B: 0.9, X: 0.1}}
    draft = _draft({**table, (A, A): {A: 1.0}, (A, A, A): {A: 1.0}}, 2)
    grower = _grower(draft)
    grower.start(prompt)
    assert grower.grow(max_depth=8, max_size=32)
    assert _paths(grower) == [b"a", b"b"]
    assert grower.branch_confidences() == pytest.approx([0.5, 0.3])
    for _ in range(4):
        grower.grow(max_depth=8, max_size=32)
    assert _paths(grower) == [b"aaaa", b"bb"]  # the pacer: a's share (0.45 of 0.72) is larger
    tree = grower.tree()
    assert len(tree) == 6 and tree.parents.count(-1) == 2
    assert grower.branch_confidences() == pytest.approx([0.45, 0.27])
    grower.close()
    assert draft.live_sequences == 0


def test_branches_stop_at_the_cap_an_end_token_and_the_depth_limit() -> None:
    prompt = list(b"p:")
    draft = _draft({(): {A: 0.4, B: 0.3, C: 0.3}, (A,): {EOS: 1.0}, (B,): {B: 1.0}, (C,): {C: 1.0}}, 2)
    grower = _grower(draft, max_branches=2)
    grower.start(prompt)
    grower.grow(max_depth=2, max_size=32)
    assert _paths(grower) == [b"a", b"b"]  # two branches at most: c is left out
    while grower.grow(max_depth=2, max_size=32):
        pass
    assert [len(b.nodes) for b in grower.branches] == [2, 2]
    assert [b.open for b in grower.branches] == [False, True]  # a ended in the end token, b hit the depth
    grower.close()


def test_a_step_never_grows_the_tree_past_its_size() -> None:
    prompt = list(b"p:")
    draft = _draft({(): {A: 0.4, B: 0.3, C: 0.3}}, 2)
    grower = _grower(draft)
    grower.start(prompt)
    assert grower.grow(max_depth=8, max_size=2)
    assert _paths(grower) == [b"a", b"b"]  # c would make three
    assert not grower.grow(max_depth=8, max_size=2)
    grower.close()


def test_settle_keeps_the_branch_holding_the_accepted_path_and_frees_the_rest() -> None:
    prompt = list(b"p:")
    draft = _draft({(): {A: 0.5, B: 0.5}, (A,): {A: 1.0}, (B,): {B: 1.0}, (B, B): {C: 1.0}}, 2)
    grower = _grower(draft)
    grower.start(prompt)
    for _ in range(4):
        grower.grow(max_depth=8, max_size=32)
    tree = grower.tree()
    b_path = [n for b in grower.branches for n in b.nodes if tree.tokens[b.nodes[0]] == B]
    assert draft.live_sequences == 2
    assert grower.settle(b_path[:2]) == len(b_path)  # N_all: the branch's length
    assert draft.live_sequences == 1
    # the next round starts from what the target kept: b b, then its own token a
    grower.start([*prompt, B, B, A])
    kept = grower.branches[0]
    assert kept.seq.tokens[: len(prompt) + 1] == [*prompt, B]  # the draft's cache is kept, not re-read
    assert kept.seq.tokens + kept.todo == [*prompt, B, B, A]
    grower.close()


def test_a_speculated_chain_starts_the_next_tree() -> None:
    prompt = list(b"p:")
    draft = _draft({(): {A: 1.0}}, 2)
    grower = _grower(draft)
    grower.start(prompt, [(A, 0.9), (B, 0.5)])
    assert _paths(grower) == [b"ab"] and grower.branch_confidences() == pytest.approx([0.45])
    assert grower.branches[0].todo == [*prompt, A, B]  # a fresh draft reads it all; B's row comes next
    grower.close()


def test_the_tree_knows_how_many_tokens_it_expects_kept() -> None:
    """The sum of its nodes' cumulative confidences: a 0.5 and b 0.3, then a's a 0.9."""
    table = {(): {A: 0.5, B: 0.3, C: 0.15, X: 0.05}, (A,): {A: 0.9, X: 0.1}, (B,): {B: 0.9, X: 0.1}}
    grower = _grower(_draft(table, 2))
    grower.start(list(b"p:"))
    grower.grow(max_depth=8, max_size=32)
    assert grower.expected == pytest.approx(0.8)
    grower.grow(max_depth=8, max_size=32)
    assert grower.expected == pytest.approx(0.8 + 0.45)
    chained = _grower(_draft(table, 2))
    chained.start(list(b"p:"), [(A, 0.5), (A, 0.9)])  # a chain from speculation
    assert chained.expected == pytest.approx(0.5 + 0.45)


def test_the_draft_reads_the_prompt_ahead_and_the_first_tree_decodes_only_what_is_new() -> None:
    draft = _draft({(): {A: 1.0}}, 3)
    grower = _grower(draft)
    grower.read(list(b"pq:"))
    assert grower.branches[0].seq.tokens == list(b"pq")
    before = len(draft.forwards)
    grower.start(list(b"pq:"))
    grower.grow(max_depth=8, max_size=32)
    assert draft.forwards[before:] == [1]  # the pending token alone
