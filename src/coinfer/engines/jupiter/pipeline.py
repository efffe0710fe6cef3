"""Stages as processes on ``torch.distributed`` (gloo): point-to-point sends of hidden
states between neighbours, nothing pickled.

Rank 0 holds the first stage and drives: it reads the prompt in the planned
sub-sequences, and for each one sends a header (``OP``, position, token count, last) and
the hidden states to rank 1 without waiting for it (``isend``), so stage 0 reads
sub-sequence j + 1 while stage 1 reads j (intra-sequence pipelined prefill, paper 004
§IV-A). Every later rank receives, runs its stage and passes on; the last rank, after the
prompt's last sub-sequence, picks the next token (``Picker``: greedy, or sampled with the
position's seeded draw) and sends it back to rank 0. Decoding is the same with one token
at a time. ``STOP`` ends every rank's loop. With one device (``world == 1``) rank 0 runs
the whole model alone: the same code, nothing sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.errors import ConfigError

__all__ = [
    "DECODE",
    "PREFILL",
    "STOP",
    "Answerer",
    "Picker",
    "Traffic",
    "HEADER_INTS",
    "MAX_SLOTS",
    "check_parts",
    "drive",
    "enter_slot",
    "make_header",
    "pass_on",
    "settle",
]

PREFILL, DECODE, STOP = 1, 2, 3
MAX_SLOTS = 64  # requests in the pipeline at once, at most: a device refuses a higher slot


class Answerer(Protocol):
    """The last stage's answer to rank 0 after a prompt or a plain decoding step: ``Picker``
    (the next token) or ``tree_pipeline.TreeVerifier`` (the token and the heads' guesses)."""

    wants: str  # "last": the last token's logits; "hidden": its hidden state

    def answer(self, stage: Any, out: Any, at: int) -> Any: ...


class Picker:
    """The last stage's choice of the next token (plain decoding)."""

    wants = "hidden"  # what the last stage's forward returns for it: the last token's hidden state

    def __init__(self, sampling: SamplingParams) -> None:
        self.sampling = sampling
        self.draws = PositionDraws(sampling.seed)

    def answer(self, stage: Any, out: Any, at: int) -> Any:
        """What goes back to rank 0 for the hidden state ``out`` (d,): the token at ``at``."""
        import torch

        return torch.tensor([self.choose(stage, out, at)], dtype=torch.int64)

    def choose(self, stage: Any, hidden: Any, at: int) -> int:
        """The token at ``at`` after the last stage's hidden state (d,): greedy, the stage's
        own choice (on a GPU one id comes back, not the logits); sampled, from its logits."""
        if self.sampling.greedy:
            return int(stage.choices(hidden[None])[0])
        return self(stage.head(hidden), at)

    def __call__(self, logits: Any, position: int) -> int:
        """``logits`` (vocab,) for the token at ``position``."""
        if self.sampling.greedy:
            return int(logits.argmax())
        return sample_at(
            probs_from_logits(logits.double().numpy(), self.sampling), self.draws.uniform(position)
        )


@dataclass
class Traffic:
    """What one rank did: bytes it sent to the next stage and seconds it computed."""

    bytes_sent: int = 0
    busy_s: float = 0.0
    forwards: int = 0
    kept: list[Any] = field(default_factory=list)  # one device: its own answers

    def compute(self, forward: Callable[[], Any]) -> Any:
        """Run one forward of this rank's stage, counting it and its seconds."""
        t0 = time.perf_counter()
        out = forward()
        self.busy_s += time.perf_counter() - t0
        self.forwards += 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"bytes_sent": self.bytes_sent, "busy_s": round(self.busy_s, 4), "forwards": self.forwards}


HEADER_INTS = 5  # a header's length: op, position, tokens, last, slot


def make_header(op: int, position: int, n: int, last: int, slot: int = 0) -> Any:
    """``(op, position, n, last, slot)``: ``last`` flags a prompt's last part, or counts a
    ``TREE``'s nodes to keep; ``slot``: the request's cache in every stage, when several
    requests are in the pipeline at once (``interleave``; 0 otherwise)."""
    import torch

    return torch.tensor([op, position, n, int(last), slot], dtype=torch.int64)


def enter_slot(stage: Any, header: Any) -> None:
    """Point ``stage`` at the cache of the header's request slot: a fresh one when the
    message is the first part of a prompt (a new request in that slot)."""
    op, position, _, _, slot = (int(v) for v in header)
    stage.use(slot, fresh=op == PREFILL and position == 0)


def pass_on(
    stage: Any,
    rank: int,
    world: int,
    header: Any,
    x: Any,
    pick: Answerer | None,
    traffic: Traffic,
    pending: list[Any],
) -> list[Any]:
    """Run ``x`` through this stage and send the result to the next rank (not waited
    for), or, on the last rank, the next token to rank 0 when the header asks. The
    previous sends (``pending``) are waited for only after the forward: the next rank
    takes them when it is done with the one before, which it does while this rank
    computes."""
    import torch.distributed as dist

    _, position, n, last, _ = (int(v) for v in header)
    wants = (pick.wants if pick is not None else "last") if last else "none"
    out = traffic.compute(lambda: stage.forward(x, position, logits=wants))
    settle(pending)
    if rank + 1 < world:
        out = out.contiguous()
        traffic.bytes_sent += header.numel() * 8 + out.numel() * out.element_size()
        return [dist.isend(header, rank + 1), dist.isend(out, rank + 1)]
    if last:
        assert pick is not None
        reply = pick.answer(stage, out, position + n)
        if world > 1:
            dist.send(reply, 0)
        else:
            traffic.kept.append(reply)
    return []


def check_parts(prompt: Sequence[int], parts: Sequence[int]) -> None:
    """``parts`` must cut ``prompt`` into sub-sequences of at least one token."""
    if sum(parts) != len(prompt) or not parts or min(parts) < 1:
        raise ConfigError(f"parts {list(parts)} do not cut a prompt of {len(prompt)} tokens")


def settle(pending: list[Any]) -> list[Any]:
    """Wait for the sends still in flight (each once: gloo's wait does not return twice)."""
    for work in pending:
        work.wait()
    return []


def _next_token(world: int, traffic: Traffic) -> int:
    import torch
    import torch.distributed as dist

    if world == 1:
        return int(traffic.kept.pop(0)[0])
    token = torch.empty(1, dtype=torch.int64)
    dist.recv(token, world - 1)
    return int(token)


def drive(
    stage: Any,
    world: int,
    prompt: Sequence[int],
    parts: Sequence[int],
    *,
    max_tokens: int,
    eos: Collection[int],
    pick: Answerer | None = None,
    traffic: Traffic | None = None,
) -> Generator[int, None, None]:
    """Rank 0: prefill ``prompt`` in ``parts``, then decode up to ``max_tokens`` (or an
    ``eos`` id), yielding each token as it arrives. ``STOP`` goes to every rank at the end,
    also when the caller stops early. ``pick``: the token choice when rank 0 is also the
    last stage (one device)."""
    import torch
    import torch.distributed as dist

    check_parts(prompt, parts)
    traffic = traffic if traffic is not None else Traffic()
    ids = torch.tensor([list(prompt)], dtype=torch.int64)
    pending: list[Any] = []
    position, produced, waiting = 0, 0, False
    try:
        for i, n in enumerate(parts):
            header = make_header(PREFILL, position, n, i == len(parts) - 1)
            x = ids[:, position : position + n]
            pending = pass_on(stage, 0, world, header, x, pick, traffic, pending)
            position += n
        waiting = True
        while True:
            pending = settle(pending)
            token = _next_token(world, traffic)
            waiting = False
            produced += 1
            yield token
            if produced >= max_tokens or token in eos:
                break
            header = make_header(DECODE, position, 1, True)
            x = torch.tensor([[token]])
            pending = pass_on(stage, 0, world, header, x, pick, traffic, pending)
            position, waiting = position + 1, True
    finally:
        if world > 1:
            if waiting:  # a token is on its way: take it so that no rank is left sending
                _next_token(world, traffic)
            dist.send(make_header(STOP, position, 0, False), 1)
