"""Stages as processes on ``torch.distributed`` (gloo): point-to-point sends of hidden
states between neighbours, nothing pickled.

Rank 0 holds the first stage and drives: it reads the prompt in the planned
sub-sequences, and for each one sends a header (``OP``, position, token count) and the
hidden states to rank 1 without waiting for it (``isend``), so stage 0 reads sub-sequence j + 1
while stage 1 reads j (intra-sequence pipelined prefill, paper 004 §IV-A). Every later
rank receives, runs its stage and passes on; the last rank, after the last sub-sequence,
takes the next token (greedy) and sends it back to rank 0. Decoding is the same with one
token at a time. ``STOP`` ends every rank's loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coinfer.errors import ConfigError

__all__ = ["DECODE", "PREFILL", "STOP", "drive", "serve"]

PREFILL, DECODE, STOP = 1, 2, 3


def _header(op: int, position: int, n: int, last: bool) -> Any:
    import torch

    return torch.tensor([op, position, n, int(last)], dtype=torch.int64)


def _pass_on(stage: Any, rank: int, world: int, header: Any, x: Any) -> list[Any]:
    """Run ``x`` through this stage and send the result to the next rank (not waited
    for), or, on the last rank, the next token to rank 0 when the header asks."""
    import torch
    import torch.distributed as dist

    _, position, _, last = (int(v) for v in header)
    out = stage.forward(x, position)
    if rank + 1 < world:
        return [dist.isend(header, rank + 1), dist.isend(out.contiguous(), rank + 1)]
    if last:
        token = out[0, -1].argmax().reshape(1).to(torch.int64)
        dist.send(token, 0)
    return []


def serve(stage: Any, rank: int, world: int, hidden_size: int) -> None:
    """A rank after the first: receive, run, pass on, until ``STOP``."""
    import torch
    import torch.distributed as dist

    pending: list[Any] = []
    while True:
        header = torch.empty(4, dtype=torch.int64)
        dist.recv(header, rank - 1)
        op, _, n, _ = (int(v) for v in header)
        if op == STOP:
            for work in pending:
                work.wait()
            if rank + 1 < world:
                dist.send(header, rank + 1)
            return
        x = torch.empty((1, n, hidden_size), dtype=torch.float32)
        dist.recv(x, rank - 1)
        for work in pending:
            work.wait()
        pending = _pass_on(stage, rank, world, header, x)


def drive(
    stage: Any, world: int, prompt: Sequence[int], parts: Sequence[int], max_tokens: int, eos: int | None
) -> list[int]:
    """Rank 0: prefill ``prompt`` in ``parts``, then decode greedily up to ``max_tokens``
    (or ``eos``); the generated ids. Sends ``STOP`` at the end."""
    import torch
    import torch.distributed as dist

    if world < 2:
        raise ConfigError("a pipeline needs at least two stages", hint="one device runs the model alone")
    if sum(parts) != len(prompt) or min(parts) < 1:
        raise ConfigError(f"parts {list(parts)} do not cut a prompt of {len(prompt)} tokens")
    ids = torch.tensor([list(prompt)], dtype=torch.int64)
    pending: list[Any] = []
    position = 0
    for i, n in enumerate(parts):
        header = _header(PREFILL, position, n, i == len(parts) - 1)
        for work in pending:
            work.wait()
        pending = _pass_on(stage, 0, world, header, ids[:, position : position + n])
        position += n
    out: list[int] = []
    while True:
        for work in pending:
            work.wait()
        token = torch.empty(1, dtype=torch.int64)
        dist.recv(token, world - 1)
        out.append(int(token))
        if len(out) >= max_tokens or (eos is not None and out[-1] == eos):
            break
        pending = _pass_on(stage, 0, world, _header(DECODE, position, 1, True), token.reshape(1, 1))
        position += 1
    dist.send(_header(STOP, position, 0, False), 1)
    return out
