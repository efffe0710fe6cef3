"""A rank after the first: it receives from the rank before, runs its stage and passes
on, until ``STOP``. Plain messages (``PREFILL``, ``DECODE``) go through
``pipeline.pass_on``; ``TREE`` messages (speculative decoding) carry their tree before
the hidden states and go through ``tree_pipeline.pass_tree``; ``BRANCH`` messages
(outline decoding's points) carry their layout so and go through
``branches.pass_branches``.
"""

from __future__ import annotations

from typing import Any

from coinfer.engines.jupiter.branches import BRANCH, MAX_NODES, pass_branches
from coinfer.engines.jupiter.pipeline import (
    HEADER_INTS,
    MAX_SLOTS,
    STOP,
    Answerer,
    Traffic,
    enter_slot,
    pass_on,
    settle,
)
from coinfer.engines.jupiter.tree_pipeline import TREE, TreeStep, pass_tree
from coinfer.errors import TransportError

__all__ = ["serve"]


def serve(stage: Any, rank: int, world: int, pick: Answerer | None) -> Traffic:
    """A rank after the first: receive, run, pass on, until ``STOP``. ``TREE`` messages
    (speculative decoding, ``tree_pipeline``) carry their tree before the hidden states."""
    import torch
    import torch.distributed as dist

    pending: list[Any] = []
    traffic, step = Traffic(), TreeStep()
    hidden = int(stage.config.hidden_size)
    while True:
        header = torch.empty(HEADER_INTS, dtype=torch.int64)
        dist.recv(header, rank - 1)
        op, _, n, m, slot = (int(v) for v in header)
        if op == STOP:
            settle(pending)
            if rank + 1 < world:
                dist.send(header, rank + 1)
            return traffic
        if not 0 <= n <= MAX_NODES or not 0 <= m <= 8 * MAX_NODES + 64 or not 0 <= slot < MAX_SLOTS:
            raise TransportError(
                f"the previous device sent a message of {n} tokens and {m} ints for slot {slot}: out of range"
            )
        meta = None
        if op == BRANCH:
            meta = torch.empty(m, dtype=torch.int64)
            dist.recv(meta, rank - 1)
            x = torch.empty((1, n, hidden), dtype=torch.float32)
            dist.recv(x, rank - 1)
            _, pending = pass_branches(stage, rank, world, header, meta, x, pick, traffic, pending)  # type: ignore[arg-type]
            continue
        if op == TREE:
            pending = settle(pending)
            meta = torch.empty(2 * n + m, dtype=torch.int64)
            dist.recv(meta, rank - 1)
        x = torch.empty((1, n, hidden), dtype=torch.float32)
        dist.recv(x, rank - 1)
        if meta is not None:
            pass_tree(stage, rank, world, header, meta, x, pick, step, traffic)  # type: ignore[arg-type]
        else:
            enter_slot(stage, header)
            pending = pass_on(stage, rank, world, header, x, pick, traffic, pending)
