"""Big Little Decoder (Kim et al., 2023), the LLMCad paper's collaboration baseline.

The little model writes tokens while it is confident (its top probability at least
``fallback``); below that it falls back: the big model reads everything the little one
wrote since the last check in one pass, keeps it up to the first token it finds too
unlikely (``-log p_big(token) > rollback``: the rollback policy), and writes the next
token itself. Unlike lossless verification it keeps tokens the big model would not have
chosen, so its text can differ from the big model's own (the bench reports ROUGE-L).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from coinfer.decoding.drafters import rewind_to
from coinfer.decoding.speculative import take_round, window_room
from coinfer.models.base import Seq, SteerableModel

__all__ = ["BLDResult", "bld_generate"]


@dataclass
class BLDResult:
    tokens: list[int]
    verifications: int
    first_token_s: float  # from the start to the first token
    total_s: float


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    shifted = x - x.max()
    return shifted - np.log(np.exp(shifted).sum())


def bld_generate(
    big: SteerableModel,
    little: SteerableModel,
    prompt: list[int],
    *,
    max_tokens: int,
    fallback: float = 0.6,
    rollback: float = 2.0,
    max_run: int = 32,
    on_first: Callable[[], object] | None = None,
) -> BLDResult:
    """Greedy BLD: up to ``max_tokens`` tokens (end-of-generation not included);
    ``on_first`` is called when the first token is there (the prefill done)."""
    start = time.perf_counter()
    bseq, lseq = big.new_sequence(), little.new_sequence()
    try:
        first = int(np.argmax(big.extend(bseq, prompt, last_only=True)[-1]))
        first_s = time.perf_counter() - start
        if on_first is not None:
            on_first()
        context, checks = list(prompt), 0
        out, finished = take_round([first], context, big, max_tokens)
        while not finished:
            room = min(max_tokens - len(out) - 1, window_room(len(context), big.n_ctx), max_run)
            written = _little_writes(little, lseq, context, fallback, room)
            rows = big.extend(bseq, [context[-1], *written])
            kept = 0
            while kept < len(written) and -_log_softmax(rows[kept])[written[kept]] <= rollback:
                kept += 1
            nxt = int(np.argmax(rows[kept]))
            big.truncate(bseq, len(context) + kept)
            checks += 1
            new, finished = take_round([*written[:kept], nxt], context, big, max_tokens - len(out))
            out += new
        return BLDResult(out, checks, first_s, time.perf_counter() - start)
    finally:
        big.release(bseq)
        little.release(lseq)


def _little_writes(
    little: SteerableModel, seq: Seq, context: list[int], fallback: float, room: int
) -> list[int]:
    """The little model's tokens after ``context`` while its confidence holds (at most ``room``)."""
    written: list[int] = []
    todo = rewind_to(little, seq, context)
    while len(written) < room:
        logp = _log_softmax(little.extend(seq, todo, last_only=True)[-1])
        token = int(np.argmax(logp))
        if np.exp(logp[token]) < fallback:
            break
        written.append(token)
        if token in little.eos_ids:
            break
        todo = [token]
    return written
