"""Self-drafting (Medusa, Cai et al. 2024; paper 004 §V-A): the candidate tree built from
the draft heads' guesses at one position.

The heads' guesses are a table ``guesses[d][j]``: head d + 1's j-th best token for the
place d + 1 after the next. A tree's shape is a list of *choices*, Medusa's sparse-tree
notation: the path ``(j1, j2, …, jd)`` is the node at depth d that follows head 1's j1-th
guess, head 2's j2-th, …; its prefixes must be choices too. The default is a chain of
every head's best guess, the paper's setting (top-1 heads).
"""

from __future__ import annotations

from collections.abc import Sequence

from coinfer.errors import ConfigError
from coinfer.models.tree import TokenTree

__all__ = ["chain_choices", "heads_tree", "widened_choices"]


def chain_choices(heads: int) -> tuple[tuple[int, ...], ...]:
    """Each head's best guess, one after the other."""
    return tuple((0,) * d for d in range(1, heads + 1))


def widened_choices(heads: int, width: int) -> tuple[tuple[int, ...], ...]:
    """The chain, plus head 1's next ``width - 1`` guesses each followed by the chain of
    best guesses below it (Medusa's trees are widest near the root)."""
    out = list(chain_choices(heads))
    for j in range(1, width):
        out += [(j, *(0,) * d) for d in range(heads)]
    return tuple(out)


def heads_tree(guesses: Sequence[Sequence[int]], choices: Sequence[Sequence[int]]) -> TokenTree:
    """The candidate tree (roots at depth 0: the places after the pending token)."""
    known = {tuple(c) for c in choices}
    paths = []
    for choice in choices:
        if len(choice) > len(guesses) or any(j >= len(guesses[d]) for d, j in enumerate(choice)):
            raise ConfigError(f"choice {tuple(choice)} needs more heads or guesses than {len(guesses)}")
        if len(choice) > 1 and tuple(choice[:-1]) not in known:
            raise ConfigError(f"choice {tuple(choice)} has no parent choice {tuple(choice[:-1])}")
        paths.append([int(guesses[d][j]) for d, j in enumerate(choice)])
    return TokenTree.from_paths(paths)
