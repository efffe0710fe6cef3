"""The candidate tree from the heads' guesses (Medusa's sparse-tree choices)."""

from __future__ import annotations

import pytest

from coinfer.decoding.self_draft import chain_choices, heads_tree, widened_choices
from coinfer.errors import ConfigError

GUESSES = [[10, 11, 12], [20, 21, 22], [30, 31, 32]]  # head d's guesses, best first


def test_the_default_tree_is_a_chain_of_each_heads_best_guess() -> None:
    tree = heads_tree(GUESSES, chain_choices(3))
    assert tree.tokens == (10, 20, 30) and tree.parents == (-1, 0, 1)


def test_a_widened_tree_branches_on_head_ones_guesses_and_chains_below_each() -> None:
    tree = heads_tree(GUESSES, widened_choices(3, 2))
    paths = {tuple(tree.tokens[n] for n in tree.path_to(i)) for i in range(len(tree))}
    assert paths == {(10,), (10, 20), (10, 20, 30), (11,), (11, 20), (11, 20, 30)}
    assert len(tree) == 6 and sorted(tree.depths()) == [0, 0, 1, 1, 2, 2]


def test_choices_the_heads_cannot_fill_or_without_a_parent_are_refused() -> None:
    with pytest.raises(ConfigError, match="more heads"):
        heads_tree(GUESSES, [(0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)])
    with pytest.raises(ConfigError, match="no parent"):
        heads_tree(GUESSES, [(0,), (1, 0, 0)])
