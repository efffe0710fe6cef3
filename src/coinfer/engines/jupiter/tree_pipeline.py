"""Speculative decoding through the pipeline with self-drafting heads (paper 004 §V-A,
Fig. 8).

After the prompt, the last stage answers rank 0 with the next token and the heads'
guesses after it. Rank 0 builds the candidate tree (``decoding.self_draft``) under that
token and sends it through every stage in one pass (``TREE``: the tree's parents, and the
nodes of the previous tree to keep). Each stage first commits its cache to the previous
tree's verified path, then runs the tree with a tree attention mask. The last stage
verifies (``accept_tree``: greedy, or the target's own sample at each position, so the
text is the target's whatever the tree holds), runs the heads on the last verified node
and answers rank 0 with the path, the next token and the new guesses: one pass of the
model per draft and verification, as the paper's workflow.

Wire, after the 4-int header ``(TREE, position, n, m)``: int64 ``parents (n) + keep (m)``,
then the ids (rank 0) or hidden states. The answer to rank 0: int64
``[count, path (n, padded), next token, guesses (K * width)]``; after the prompt
``[0, next token, guesses]``.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Generator, Sequence
from dataclasses import dataclass
from typing import Any

from coinfer.decoding.sampling import SamplingParams
from coinfer.decoding.self_draft import heads_tree
from coinfer.decoding.tree_sizer import TreeSizer
from coinfer.decoding.verify import accept_tree
from coinfer.engines.jupiter.pipeline import (
    PREFILL,
    STOP,
    Answerer,
    Picker,
    Traffic,
    check_parts,
    make_header,
    pass_on,
    settle,
)
from coinfer.models.tree import TokenTree

__all__ = [
    "TREE",
    "TreeRound",
    "TreeStep",
    "TreeVerifier",
    "cut_at_end",
    "drive_tree",
    "pass_tree",
    "prefill_answer",
]

TREE = 4


class TreeVerifier:
    """The last stage's part: verify a tree, pick the next token, guess the ones after."""

    def __init__(self, sampling: SamplingParams, heads: Any, width: int) -> None:
        self.sampling, self.heads, self.width = sampling, heads, width
        self.pick = Picker(sampling)  # the next token: greedy, or the position's seeded draw

    def _guesses(self, stage: Any, hidden: Any) -> list[int]:
        """(d,) -> the heads' ``width`` best per head, flat (K * width)."""
        guesses = stage.guesses(self.heads, hidden[None], self.width)
        return [int(t) for t in guesses[0].flatten()]

    wants = "hidden"  # the prompt's last hidden state: the heads guess from it

    def answer(self, stage: Any, out: Any, at: int) -> Any:
        """After the prompt: ``out`` (d,), the hidden state of its last token; ``at``: the
        place of the token to choose."""
        import torch

        token = self.pick.choose(stage, out, at)
        return torch.tensor([0, token, *self._guesses(stage, out)], dtype=torch.int64)

    def verify(
        self, stage: Any, hidden: Any, parents: Sequence[int], tokens: Sequence[int], position: int
    ) -> Any:
        """``hidden`` (n, d) of the tree ``tokens``/``parents`` whose root (the pending
        token) sits at ``position``."""
        import torch

        candidates = TokenTree.of(tokens[1:], [p - 1 for p in parents[1:]])
        rows = stage.choices(hidden) if self.sampling.greedy else stage.head(hidden).float().numpy()
        path, token = accept_tree(candidates, rows, self.sampling, self.pick.draws, position + 1)
        last = path[-1] + 1 if path else 0
        padded = [p + 1 for p in path] + [0] * (len(parents) - len(path))
        out = [len(path), *padded, token, *self._guesses(stage, hidden[last])]
        return torch.tensor(out, dtype=torch.int64)


@dataclass
class TreeStep:
    """A stage's memory of the tree it ran last: where it started, to commit it later."""

    start: int | None = None


def pass_tree(
    stage: Any,
    rank: int,
    world: int,
    header: Any,
    meta: Any,
    x: Any,
    verifier: TreeVerifier | None,
    step: TreeStep,
    traffic: Traffic,
    ids: Sequence[int] = (),
) -> Any:
    """Commit the previous tree, run this one, pass it on; the last rank answers rank 0
    (returned where this rank is rank 0 too, else sent). ``ids``: the tree's tokens (rank
    0 and a lone device know them; the last stage of several learns them from ``meta``)."""
    import torch.distributed as dist

    _, position, n, m, _ = (int(v) for v in header)
    parents, keep = [int(v) for v in meta[:n]], [int(v) for v in meta[n : n + m]]
    if step.start is not None:
        stage.commit(step.start, keep)
    step.start = position
    hidden = traffic.compute(lambda: stage.forward_tree(x, position, parents))
    if rank + 1 < world:
        out = hidden.contiguous()
        traffic.bytes_sent += (header.numel() + meta.numel()) * 8 + out.numel() * out.element_size()
        for t in (header, meta, out):
            dist.send(t, rank + 1)
        return None
    assert verifier is not None
    tokens = ids if ids else [int(v) for v in meta[n + m :]]
    reply = verifier.verify(stage, hidden[0], parents, tokens, position)
    if world > 1:
        dist.send(reply, 0)
        return None
    return reply


def _tree_meta(tree_ids: Sequence[int], parents: Sequence[int], keep: Sequence[int], world: int) -> Any:
    """``parents + keep``, and the tokens too when the last stage is another process (it
    needs them to verify)."""
    import torch

    tail = list(tree_ids) if world > 1 else []
    return torch.tensor([*parents, *keep, *tail], dtype=torch.int64)


def _answer(world: int, size: int, local: Any) -> list[int]:
    import torch
    import torch.distributed as dist

    if world == 1:
        return [int(v) for v in local]
    reply = torch.empty(size, dtype=torch.int64)
    dist.recv(reply, world - 1)
    return [int(v) for v in reply]


@dataclass
class TreeRound:
    """What one verification gave: the tokens it emits, the tree's size, the path's length."""

    tokens: list[int]
    drafted: int
    accepted: int


def drive_tree(
    stage: Any,
    world: int,
    prompt: Sequence[int],
    parts: Sequence[int],
    *,
    max_tokens: int,
    eos: Collection[int],
    choices: Sequence[Sequence[int]],
    heads: int,
    width: int,
    verifier: TreeVerifier | None = None,
    traffic: Traffic | None = None,
    sizer: TreeSizer | None = None,
) -> Generator[TreeRound, None, None]:
    """Rank 0: prefill ``prompt`` in ``parts``, then decode with candidate trees of
    ``choices`` until ``max_tokens`` or an ``eos`` id; one ``TreeRound`` per verification
    (the first: the token after the prompt). ``verifier``: when rank 0 is the last stage.
    ``sizer`` (made for ``choices``): each round, the part of them that pays."""
    import torch
    import torch.distributed as dist

    check_parts(prompt, parts)
    traffic = traffic if traffic is not None else Traffic()
    position, produced, expect = 0, 0, 2 + heads * width
    step = TreeStep()
    try:
        first = prefill_answer(stage, world, prompt, parts, verifier, traffic, expect)
        position, expect = len(prompt), 0
        token, guesses = first[1], first[2:]
        emitted, produced = [token], 1
        yield TreeRound(emitted, 0, 0)
        keep: list[int] = []
        while produced < max_tokens and token not in eos:
            table = [guesses[d * width : (d + 1) * width] for d in range(heads)]
            tree_ids, parents = _candidates(table, choices, sizer, emitted).verify_inputs(token)
            n, began = len(tree_ids), time.perf_counter()
            expect = 2 + n + heads * width
            reply = _send_tree(
                stage, world, (tree_ids, parents, keep), position, verifier, step, traffic, expect
            )
            if sizer is not None:
                sizer.timed(n, time.perf_counter() - began)
            expect = 0
            count = reply[0]
            keep = [0, *reply[1 : 1 + count]]
            position += len(keep)
            token, guesses = reply[1 + n], reply[2 + n :]
            emitted = cut_at_end([tree_ids[k] for k in keep[1:]] + [token], eos, max_tokens - produced)
            produced += len(emitted)
            yield TreeRound(emitted, n - 1, count)
            if emitted[-1] != token:
                break  # an end-of-generation id among the verified ones
    finally:
        if world > 1:
            if expect:  # an answer is on its way: take it so that no rank is left sending
                dist.recv(torch.empty(expect, dtype=torch.int64), world - 1)
            dist.send(make_header(STOP, position, 0, False), 1)


def _send_tree(
    stage: Any, world: int, tree: tuple[list[int], list[int], list[int]], position: int,
    verifier: TreeVerifier | None, step: TreeStep, traffic: Traffic, expect: int,
) -> list[int]:  # fmt: skip
    """Rank 0: the tree (its ids, parents, and the nodes of the last one to keep) through
    every stage; the answer."""
    import torch

    tree_ids, parents, keep = tree
    x = torch.tensor([tree_ids])
    header = make_header(TREE, position, len(tree_ids), len(keep))
    meta = _tree_meta(tree_ids, parents, keep, world)
    local = pass_tree(stage, 0, world, header, meta, x, verifier, step, traffic, tree_ids)
    return _answer(world, expect, local)


def _candidates(
    table: Sequence[Sequence[int]], choices: Sequence[Sequence[int]], sizer: TreeSizer | None,
    emitted: Sequence[int],
) -> TokenTree:  # fmt: skip
    """This round's tree: every choice, or the sizer's cut (told first what the last round
    emitted and the guesses after it)."""
    if sizer is None:
        return heads_tree(table, choices)
    sizer.observe(table, emitted)
    return heads_tree(table, sizer.choose())


def prefill_answer(
    stage: Any, world: int, prompt: Sequence[int], parts: Sequence[int], verifier: Answerer | None,
    traffic: Traffic, expect: int,
) -> list[int]:  # fmt: skip
    """The prompt in its parts (pipelined, as plain decoding reads it); the last stage's
    answer (``expect`` int64s): ``[0, next token, the heads' guesses]``."""
    import torch

    ids = torch.tensor([list(prompt)], dtype=torch.int64)
    position, pending = 0, list[Any]()
    for i, n in enumerate(parts):
        header = make_header(PREFILL, position, n, i == len(parts) - 1)
        pending = pass_on(
            stage, 0, world, header, ids[:, position : position + n], verifier, traffic, pending
        )
        position += n
    settle(pending)
    return _answer(world, expect, traffic.kept.pop() if world == 1 else None)


def cut_at_end(tokens: list[int], eos: Collection[int], room: int) -> list[int]:
    """``tokens`` up to the first end-of-generation id (kept) and at most ``room``."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: min(i + 1, room)]
    return tokens[:room]
