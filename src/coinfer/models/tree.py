"""The one token tree: several drafted continuations, decoded and verified in one forward.

A tree is a list of nodes in topological order (every parent before its children); node
i holds ``tokens[i]`` and ``parents[i]``, the index of its parent or -1 for a root. Roots
are at depth 0 and hang off the end of the sequence the tree extends, so node i sits at
position ``len(sequence) + depth`` and sees the sequence, its ancestors and itself (the
attention mask). The backends decode a tree in one forward (``SteerableModel.extend``
with ``parents``); engines build trees from drafts and verify them.

Verification runs the target once over ``verify_inputs(pending)``: the pending token (the
last one chosen, not yet in the cache) as the one root, the tree under it. Row 0 of the
result is the target's choice after the context, row i + 1 its choice after node i. The
accepted path is the longest root-to-node path whose every token is the target's choice
after its parent (``greedy_path``), found depth first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coinfer.errors import ConfigError

__all__ = ["TokenTree"]


@dataclass(frozen=True)
class TokenTree:
    """Tokens and the parent of each (-1: a root, at depth 0)."""

    tokens: tuple[int, ...]
    parents: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.tokens) != len(self.parents):
            raise ConfigError(f"{len(self.tokens)} tokens need as many parents, got {len(self.parents)}")
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ConfigError(
                    f"node {i} has parent {p}: a parent must be -1 (a root) or an earlier node (0..{i - 1})"
                )

    @classmethod
    def of(cls, tokens: Sequence[int], parents: Sequence[int]) -> TokenTree:
        """A tree from any sequences of ints (numpy arrays included)."""
        return cls(tuple(int(t) for t in tokens), tuple(int(p) for p in parents))

    @classmethod
    def chain(cls, tokens: Sequence[int]) -> TokenTree:
        """A single continuation: each token the child of the one before."""
        return cls.of(tokens, range(-1, len(tokens) - 1))

    @classmethod
    def from_paths(cls, paths: Sequence[Sequence[int]]) -> TokenTree:
        """Merge continuations into a trie: shared prefixes become shared nodes."""
        tokens: list[int] = []
        parents: list[int] = []
        index: dict[tuple[int, int], int] = {}  # (parent, token) -> node
        for path in paths:
            parent = -1
            for token in path:
                key = (parent, int(token))
                if key not in index:
                    index[key] = len(tokens)
                    tokens.append(int(token))
                    parents.append(parent)
                parent = index[key]
        return cls(tuple(tokens), tuple(parents))

    def __len__(self) -> int:
        return len(self.tokens)

    def depths(self) -> list[int]:
        """Depth of each node; roots have depth 0."""
        out: list[int] = []
        for p in self.parents:
            out.append(0 if p < 0 else out[p] + 1)
        return out

    def children(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.tokens]
        for i, p in enumerate(self.parents):
            if p >= 0:
                out[p].append(i)
        return out

    def leaves_below(self) -> list[set[int]]:
        """For each node, the leaves of its subtree (a leaf is a node with no children)."""
        has_children = {p for p in self.parents if p >= 0}
        sets: list[set[int]] = [set() if i in has_children else {i} for i in range(len(self))]
        for i in range(len(self) - 1, -1, -1):
            if self.parents[i] >= 0:
                sets[self.parents[i]] |= sets[i]
        return sets

    def path_to(self, node: int) -> list[int]:
        """Node indices from a root down to ``node``."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def nodes_along(self, tokens: Sequence[int]) -> list[int]:
        """The nodes that spell ``tokens`` from a root down, as far as the tree has them."""
        children, level, out = self.children(), [i for i, p in enumerate(self.parents) if p < 0], []
        for token in tokens:
            node = next((n for n in level if self.tokens[n] == int(token)), None)
            if node is None:
                break
            out.append(node)
            level = children[node]
        return out

    def is_path(self, nodes: Sequence[int]) -> bool:
        """Whether ``nodes`` is a root-to-node path of this tree."""
        expected_parent = -1
        for n in nodes:
            if not 0 <= n < len(self) or self.parents[n] != expected_parent:
                return False
            expected_parent = n
        return True

    def attention_mask(self) -> np.ndarray:
        """(n, n) bool: node i attends to node j iff j is i or one of its ancestors."""
        n = len(self.tokens)
        mask = np.zeros((n, n), dtype=bool)
        for i, p in enumerate(self.parents):
            if p >= 0:
                mask[i] = mask[p]
            mask[i, i] = True
        return mask

    def verify_inputs(self, pending: int) -> tuple[list[int], list[int]]:
        """Ids and parents for ``SteerableModel.extend``: the pending token, then the tree under it."""
        return [pending, *self.tokens], [-1, *(p + 1 for p in self.parents)]

    def greedy_path(self, choices: Sequence[int]) -> tuple[list[int], int]:
        """(accepted nodes root first, the target's next token) for the target's argmax ``choices``.

        ``choices[0]`` is the target's token after the context, ``choices[i + 1]`` its
        token after node i. Among verified paths the longest wins (the first on a tie).
        """
        if len(choices) != len(self.tokens) + 1:
            raise ConfigError(f"need {len(self.tokens) + 1} choices, got {len(choices)}")
        children = self.children()
        roots = [i for i, p in enumerate(self.parents) if p < 0]

        def longest(candidates: list[int], choice: int) -> list[int]:
            best: list[int] = []
            for c in candidates:
                if self.tokens[c] == choice:
                    below = [c, *longest(children[c], int(choices[c + 1]))]
                    if len(below) > len(best):
                        best = below
            return best

        path = longest(roots, int(choices[0]))
        return path, int(choices[path[-1] + 1] if path else choices[0])
