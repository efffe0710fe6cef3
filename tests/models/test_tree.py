"""Token trees: merging drafts, the attention mask, and the longest verified path."""

from __future__ import annotations

import numpy as np
import pytest

from coinfer.errors import ConfigError, SequenceError
from coinfer.models import SteerableModel, TokenTree, load_model
from coinfer.testing import ScriptedModel
from tests.conftest import needs_torch, plain

#        root: 5 (0)
#        ├── 6 (1) ── 7 (2) ── 8 (3)
#        └── 9 (4) ── 7 (5)
#        root: 4 (6)
PATHS = [[5, 6, 7, 8], [5, 9, 7], [5, 6, 7], [4]]


def test_paths_merge_into_a_trie_with_depths_and_children() -> None:
    tree = TokenTree.from_paths(PATHS)
    assert tree.tokens == (5, 6, 7, 8, 9, 7, 4)
    assert tree.parents == (-1, 0, 1, 2, 0, 4, -1)
    assert tree.depths() == [0, 1, 2, 3, 1, 2, 0]  # roots at depth 0
    assert tree.children() == [[1, 4], [2], [3], [], [5], [], []]
    assert tree.path_to(3) == [0, 1, 2, 3] and tree.path_to(6) == [6]
    assert tree.leaves_below() == [{3, 5}, {3}, {3}, {3}, {5}, {5}, {6}]
    assert tree.is_path([0, 4, 5]) and not tree.is_path([0, 5]) and not tree.is_path([1])


def test_each_node_attends_to_itself_and_its_ancestors_only() -> None:
    mask = TokenTree.from_paths(PATHS).attention_mask()
    expected = np.zeros((7, 7), dtype=bool)
    for node, seen in {
        0: [0],
        1: [0, 1],
        2: [0, 1, 2],
        3: [0, 1, 2, 3],
        4: [0, 4],
        5: [0, 4, 5],
        6: [6],
    }.items():
        expected[node, seen] = True
    assert (mask == expected).all()
    assert (TokenTree.chain([3, 1, 2]).attention_mask() == np.tril(np.ones((3, 3), dtype=bool))).all()


def test_verify_inputs_hang_the_tree_under_the_pending_token() -> None:
    ids, parents = TokenTree.from_paths([[5, 6], [7]]).verify_inputs(pending=1)
    assert ids == [1, 5, 6, 7] and parents == [-1, 0, 1, 0]


@pytest.mark.parametrize(
    ("choices", "path", "next_token"),
    [
        # choices[0] after the context; choices[i + 1] after node i
        ([5, 6, 7, 8, 2, 7, 0, 3], [0, 1, 2, 3], 2),  # the whole deepest branch, then a bonus token
        ([5, 9, 7, 1, 0, 7, 3, 0], [0, 4, 5], 3),  # the other branch at depth 2
        ([5, 6, 1, 0, 0, 0, 0, 0], [0, 1], 1),  # stops where the target disagrees
        ([4, 0, 0, 0, 0, 0, 0, 2], [6], 2),  # the second root
        ([3, 0, 0, 0, 0, 0, 0, 0], [], 3),  # nothing verified: the target's own token
    ],
)
def test_greedy_path_is_the_longest_verified_one(
    choices: list[int], path: list[int], next_token: int
) -> None:
    assert TokenTree.from_paths(PATHS).greedy_path(choices) == (path, next_token)


def test_bad_trees_are_refused() -> None:
    with pytest.raises(ConfigError):
        TokenTree((1, 2), (-1, 1))  # a node cannot be its own parent
    with pytest.raises(ConfigError):
        TokenTree((1,), (-1, 0))
    with pytest.raises(ConfigError):
        TokenTree.chain([1, 2]).greedy_path([1])


@needs_torch
def test_one_forward_over_a_tree_verifies_the_targets_greedy_branch(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    """A real model: the branch that is its greedy continuation is accepted whole, a decoy is not."""
    model: SteerableModel = load_model(str(tiny_dirs["llama"]), backend="transformers")
    prompt = model.text_prompt("def add(a, b):")
    greedy = plain(model, prompt, 6).tokens
    decoy = [greedy[0], (greedy[1] + 1) % model.vocab_size, greedy[2]]
    tree = TokenTree.from_paths([decoy, greedy[:5]])
    seq = model.new_sequence()
    model.extend(seq, prompt[:-1])
    ids, parents = tree.verify_inputs(prompt[-1])
    choices = np.argmax(model.extend(seq, ids, parents=parents), axis=-1)
    path, next_token = tree.greedy_path(choices)
    assert [tree.tokens[i] for i in path] == greedy[:5]
    assert next_token == greedy[5]
    model.commit_path(seq, [0, *(i + 1 for i in path)])
    assert seq.tokens == [*prompt, *greedy[:5]]
    model.release(seq)


def test_a_backend_decodes_each_tree_node_after_its_own_path() -> None:
    """The scripted model's next token is the sum of its prefix mod 7: each node's row
    must follow its own ancestors, not the nodes before it in the list."""
    model = ScriptedModel(lambda prefix: sum(prefix) % 7)
    seq = model.new_sequence()
    model.extend(seq, [1, 2])
    tree = TokenTree.from_paths([[3, 4], [5]])
    rows = model.extend(seq, list(tree.tokens), parents=list(tree.parents))
    assert rows.argmax(-1).tolist() == [(1 + 2 + 3) % 7, (1 + 2 + 3 + 4) % 7, (1 + 2 + 5) % 7]
    with pytest.raises(SequenceError):
        model.extend(seq, [1])  # a tree is pending
    with pytest.raises(SequenceError):
        model.commit_path(seq, [0, 2])  # not a path of the tree
    model.commit_path(seq, [2])
    assert seq.tokens == [1, 2, 5] and seq.pending is None
    with pytest.raises(SequenceError):
        model.truncate(seq, 4)
    model.release(seq)
    with pytest.raises(SequenceError):
        model.extend(seq, [1])  # released
