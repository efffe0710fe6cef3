"""The tree sizer: verifies the part of the heads' candidate tree that pays, down to none
where the guesses do not hold, all of it where they do; every cut is a tree."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from coinfer.decoding.self_draft import heads_tree, widened_choices
from coinfer.decoding.tree_sizer import TreeSizer, path_holds
from coinfer.errors import ConfigError

HEADS, WIDTH = 4, 2
TEXT = list(range(1000, 3000))  # the target's tokens, the same whatever the tree


def _table(root: int, good: int) -> list[list[int]]:
    """Heads whose best guesses hold for the first ``good`` places after ``root``."""
    return [[TEXT[root + 1 + d] if d < good else -1, -2 - d] for d in range(HEADS)]


def _decode(
    sizer: TreeSizer, good: Callable[[int], int], cost: Callable[[int], float], rounds: int
) -> list[int]:
    """Drive ``sizer`` as rank 0 does; returns the candidates verified per round."""
    root, emitted, sizes = 0, [TEXT[0]], []
    for _ in range(rounds):
        table = _table(root, good(root))
        sizer.observe(table, emitted)
        chosen = sizer.choose()
        tree = heads_tree(table, chosen)  # raises unless every cut is a tree
        kept = max((len(c) for c in chosen if path_holds(c, table, TEXT[root + 1 :])), default=0)
        sizer.timed(len(tree) + 1, cost(len(tree) + 1))
        emitted = TEXT[root + 1 : root + 2 + kept]
        root += 1 + kept
        sizes.append(len(tree))
    return sizes


def _cpu_cost(nodes: int) -> float:
    """A CPU's curve: each node costs a fifth of the first."""
    return 1.0 + 0.2 * (nodes - 1)


def test_guesses_that_never_hold_leave_plain_decoding() -> None:
    sizes = _decode(TreeSizer(widened_choices(HEADS, WIDTH)), lambda r: 0, _cpu_cost, 120)
    late = sizes[40:]
    assert sum(s == 0 for s in late) >= 0.9 * len(late)


def test_guesses_that_hold_get_the_whole_chain_verified() -> None:
    sizes = _decode(TreeSizer(widened_choices(HEADS, WIDTH)), lambda r: HEADS, _cpu_cost, 60)
    assert sorted(sizes[20:])[len(sizes[20:]) // 2] >= HEADS  # the median round: the whole chain


def test_the_sizer_follows_the_text_from_guessable_to_not() -> None:
    sizer = TreeSizer(widened_choices(HEADS, WIDTH))
    sizes = _decode(sizer, lambda r: HEADS if r < 400 else 0, _cpu_cost, 300)
    assert sizes[30] >= HEADS and sizes[-1] == 0
    assert sizer.summary()["plain_rounds"] > 0


def test_a_flat_cost_curve_verifies_even_weak_guesses() -> None:
    """Where a node costs next to nothing (a GPU's regime), a guess that holds one time in
    four is worth verifying."""
    sizes = _decode(TreeSizer(widened_choices(HEADS, WIDTH)), lambda r: 1 if r % 4 == 0 else 0,
                    lambda n: 1.0 + 0.001 * n, 100)  # fmt: skip
    assert min(sizes[40:]) >= 1


def test_every_probe_every_rounds_the_runner_up_runs() -> None:
    sizer = TreeSizer(widened_choices(HEADS, WIDTH), probe_every=10)
    sizes = _decode(sizer, lambda r: 0, _cpu_cost, 100)
    assert all(sizes[i] > 0 for i in range(19, 100, 10))  # rounds 20, 30, …


def test_path_holds_reads_the_named_guesses() -> None:
    table = [[5, 6], [7, 8]]
    assert path_holds((1, 0), table, [6, 7]) and not path_holds((0, 0), table, [6, 7])
    assert not path_holds((0, 0), table, [5])  # the text is not known that far


def test_choices_without_their_prefixes_are_refused() -> None:
    with pytest.raises(ConfigError):
        TreeSizer([(0, 0)])


def test_texts_decoded_together_are_each_scored_against_their_own_tokens() -> None:
    sizer = TreeSizer(widened_choices(HEADS, WIDTH))
    texts = {0: TEXT, 1: TEXT[::-1]}
    roots, emitted = {0: 0, 1: 0}, {b: [t[0]] for b, t in texts.items()}
    sizes = []
    for _ in range(40):
        for b, text in texts.items():  # two branches' rounds, interleaved
            table = [[text[roots[b] + 1 + d], -1] for d in range(HEADS)]  # the best guesses hold
            sizer.observe(table, emitted[b], stream=b)
            emitted[b] = text[roots[b] + 1 : roots[b] + 2 + HEADS]
            roots[b] += 1 + HEADS
        sizes.append(len(sizer.choose(streams=2)))
        sizer.timed(2 * (sizes[-1] + 1), _cpu_cost(2 * (sizes[-1] + 1)))
    assert sizes[-1] >= HEADS
