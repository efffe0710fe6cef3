"""Several branches through the pipeline in one pass (outline decoding, paper 004 §V-B):
each outline point is a branch that shares the prompt's cache on every stage and grows its
own entries after it; one ``BRANCH`` call carries a piece of every active branch of a
group, so the stages work on all of them at once.

A piece is a branch's known tokens (``feed``: its pending token, or at a point's start the
request that asks for it) and, with self-drafting heads, a candidate tree under the last
of them (§V-A inside each branch). The last stage verifies each piece's tree as
``tree_pipeline`` does and answers rank 0 with, per piece, ``[count, path (c, padded),
next token, guesses (K * width)]``. The candidates it rejects are dropped from every
stage's cache at the start of the next call (``drops``: cache entries by index).

Wire, after the 4-int header ``(BRANCH, entries before the call (after its drops), n,
m)``: int64 meta of ``m``: ``[d, P, drops (d), positions (n), branches (n), parents (n),
pieces (4 P: branch, root node, candidates, root position)]`` and, when the last stage is
another process, the ``n`` token ids; then the ids (rank 0) or hidden states.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from coinfer.decoding.sampling import PositionDraws, SamplingParams
from coinfer.decoding.verify import accept_tree
from coinfer.engines.jupiter.pipeline import Picker, Traffic, make_header, settle
from coinfer.errors import TransportError
from coinfer.models.tree import TokenTree

__all__ = ["BRANCH", "BranchCall", "BranchVerifier", "Piece", "pass_branches", "read_branch_meta"]

BRANCH = 5
MAX_NODES = 4096  # a call's nodes at most: a device refuses a larger one


@dataclass(frozen=True)
class Piece:
    """A branch's part of one call: ``feed`` (a chain of known tokens from ``start``) and
    the candidate ``tree`` under its last token (empty: none)."""

    branch: int
    start: int
    feed: tuple[int, ...]
    tree: TokenTree = field(default_factory=lambda: TokenTree((), ()))


@dataclass(frozen=True)
class BranchCall:
    """The nodes of one call, laid out piece after piece: feed chain, then its tree."""

    tokens: list[int]
    positions: list[int]
    branches: list[int]
    parents: list[int]
    pieces: list[tuple[int, int, int, int]]  # branch, root node, candidates, root position

    @classmethod
    def of(cls, pieces: Sequence[Piece]) -> BranchCall:
        call = cls([], [], [], [], [])
        for piece in pieces:
            call._add(piece)
        return call

    def _add(self, piece: Piece) -> None:
        if not piece.feed:
            raise TransportError(f"branch {piece.branch}'s piece has no token to feed")
        first = len(self.tokens)
        for i, token in enumerate(piece.feed):
            self._node(token, piece.start + i, piece.branch, first + i - 1 if i else -1)
        root, depths = len(self.tokens) - 1, piece.tree.depths()
        for token, parent, depth in zip(piece.tree.tokens, piece.tree.parents, depths, strict=True):
            self._node(token, piece.start + len(piece.feed) + depth, piece.branch,
                       root if parent < 0 else root + 1 + parent)  # fmt: skip
        self.pieces.append((piece.branch, root, len(piece.tree), piece.start + len(piece.feed) - 1))

    def _node(self, token: int, position: int, branch: int, parent: int) -> None:
        self.tokens.append(int(token))
        self.positions.append(position)
        self.branches.append(branch)
        self.parents.append(parent)

    def reply_size(self, guesses: int) -> int:
        """The int64s the last stage answers: per piece 2 + candidates + ``guesses``."""
        return sum(2 + c + guesses for _, _, c, _ in self.pieces)

    def meta(self, drops: Sequence[int], *, with_tokens: bool) -> Any:
        import torch

        flat = [x for piece in self.pieces for x in piece]
        tail = self.tokens if with_tokens else []
        values = [len(drops), len(self.pieces), *drops, *self.positions, *self.branches, *self.parents,
                  *flat, *tail]  # fmt: skip
        return torch.tensor(values, dtype=torch.int64)


def read_branch_meta(meta: Sequence[int], n: int) -> tuple[list[int], BranchCall]:
    """(drops, the call) from a ``BRANCH`` message's meta; a malformed one is refused."""
    values = [int(v) for v in meta]
    if len(values) < 2 or not 0 <= n <= MAX_NODES:
        raise TransportError("a BRANCH message too short or too large")
    d, p = values[0], values[1]
    body = values[2:]
    if d < 0 or p < 1 or len(body) not in (d + 3 * n + 4 * p, d + 4 * n + 4 * p):
        raise TransportError(
            f"a BRANCH message of {len(values)} ints does not hold {d} drops, {n} nodes, {p} pieces"
        )
    drops, rest = body[:d], body[d:]
    positions, branches, parents = rest[:n], rest[n : 2 * n], rest[2 * n : 3 * n]
    flat = rest[3 * n : 3 * n + 4 * p]
    pieces = [(flat[4 * i], flat[4 * i + 1], flat[4 * i + 2], flat[4 * i + 3]) for i in range(p)]
    tokens = rest[3 * n + 4 * p :]
    return drops, BranchCall(tokens, positions, branches, parents, pieces)


class BranchVerifier:
    """The last stage's part: per piece, verify its tree (none: just choose), pick the next
    token and, with heads, guess the ones after. Each branch draws its own seeded samples."""

    wants = "hidden"  # after a prompt: its last hidden state

    def __init__(self, sampling: SamplingParams, heads: Any = None, width: int = 1) -> None:
        self.sampling, self.heads, self.width = sampling, heads, width
        self.pick = Picker(sampling)
        self._draws: dict[int, PositionDraws] = {-1: self.pick.draws}

    def draws(self, branch: int) -> PositionDraws:
        if branch not in self._draws:
            self._draws[branch] = PositionDraws(self.pick.draws.seed + 7919 * (branch + 1))
        return self._draws[branch]

    def _guesses(self, stage: Any, hidden: Any) -> list[list[int]]:
        """(p, d) -> each row's heads' ``width`` best per head, flat."""
        if self.heads is None:
            return [[] for _ in range(int(hidden.shape[0]))]
        guesses = stage.guesses(self.heads, hidden, self.width)
        return [[int(t) for t in row.flatten()] for row in guesses]

    def answer(self, stage: Any, out: Any, at: int) -> Any:
        """After a prompt (``out``: its last hidden state): ``[0, token, guesses]``."""
        import torch

        token = self.pick.choose(stage, out, at)
        return torch.tensor([0, token, *self._guesses(stage, out[None])[0]], dtype=torch.int64)

    def verify(self, stage: Any, hidden: Any, call: BranchCall) -> Any:
        """``hidden`` (n, d) of the call's nodes: the answer for every piece."""
        import torch

        answers: list[list[int]] = []
        lasts: list[int] = []
        for branch, root, count, at in call.pieces:
            nodes = list(range(root, root + 1 + count))
            mine = hidden[nodes]
            rows = stage.choices(mine) if self.sampling.greedy else stage.head(mine).float().numpy()
            tree = TokenTree.of(
                [call.tokens[i] for i in nodes[1:]], [call.parents[i] - root - 1 for i in nodes[1:]]
            )
            path, token = accept_tree(tree, rows, self.sampling, self.draws(branch), at + 1)
            lasts.append(root + 1 + path[-1] if path else root)
            answers.append([len(path), *path, *([0] * (count - len(path))), token])
        guesses = self._guesses(stage, hidden[lasts])
        return torch.tensor(
            [v for a, g in zip(answers, guesses, strict=True) for v in a + g], dtype=torch.int64
        )


def pass_branches(
    stage: Any,
    rank: int,
    world: int,
    header: Any,
    meta: Any,
    x: Any,
    verifier: BranchVerifier | None,
    traffic: Traffic,
    pending: list[Any],
    call: BranchCall | None = None,
) -> tuple[Any, list[Any]]:
    """Drop, run, pass on (not waited for: ``pending``, settled after the next forward);
    the last rank answers rank 0 (returned where this rank is rank 0 too). ``call``: rank
    0's own (the others read it from ``meta``). Returns (the answer or None, pending)."""
    import torch.distributed as dist

    _, position, n, _, _ = (int(v) for v in header)
    drops, read = read_branch_meta(meta, n)
    call = call if call is not None else read
    stage.drop(drops)
    if stage.length != position:
        raise TransportError(
            f"stage {stage.start}-{stage.stop} holds {stage.length} entries, the call expects {position}"
        )
    hidden = traffic.compute(lambda: stage.forward_branches(x, call.positions, call.branches, call.parents))
    pending = settle(pending)
    if rank + 1 < world:
        out = hidden.contiguous()
        traffic.bytes_sent += (header.numel() + meta.numel()) * 8 + out.numel() * out.element_size()
        return None, [dist.isend(t, rank + 1) for t in (header, meta, out)]
    assert verifier is not None
    reply = verifier.verify(stage, hidden[0], call)
    if world > 1:
        dist.send(reply, 0)
        return None, []
    return reply, []


def branch_header(position: int, n: int, meta: Any) -> Any:
    return make_header(BRANCH, position, n, int(meta.numel()))
