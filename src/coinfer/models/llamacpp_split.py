"""How llama.cpp with a cache per sequence splits one batch into passes.

It runs several sequences in one pass only as an equal split (``split_equal`` in the
vendored ``llama-batch.cpp``): as many rows from each, over streams in increasing,
consecutive order. coinfer hands it a batch one group of equal row counts at a time
(``equal_groups``), and prices a batch by the passes that makes (``split_passes``,
``SteerableModel.pass_rows``). Which streams are free is ``FreeStreams``: a plain step of 8
requests over streams split 3 + 5 or 1 + 1 + 6 cost 1.2x one over streams 0-7 on a 2-core AVX2
CPU (``docs/bench/serve``), so a kept cache moves out of the live streams' way (``park``).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from itertools import pairwise

from coinfer.errors import ModelError

__all__ = ["FreeStreams", "equal_groups", "split_passes"]


def equal_groups(rows: Sequence[tuple[int, int, tuple[int, ...]]]) -> list[list[int]]:
    """The (token, position, seq_ids) rows' indexes in groups whose sequences each bring
    the same number of rows, fewest rows first.

    A prompt chunk beside other sequences' single tokens, in one batch, had its first row
    run with them, on the kernels of a few rows, and the rest in a pass of its own: that
    row's cache entry differed from the same prompt read in one piece, and the answer with
    it (SmolLM2, a prompt continued from a shared prefix: 0.44 off in its last logits; 2
    of 32 greedy answers of the load test changed). Each group goes to llama.cpp on its
    own, so a chunk is read whole, as alone, and single tokens still share their pass."""
    by_seq: dict[tuple[int, ...], list[int]] = {}
    for i, (_, _, seq_ids) in enumerate(rows):
        by_seq.setdefault(seq_ids, []).append(i)
    if len(by_seq) < 2 or len({len(v) for v in by_seq.values()}) < 2:
        return [list(range(len(rows)))]
    groups: dict[int, list[int]] = {}
    for indexes in by_seq.values():
        groups.setdefault(len(indexes), []).extend(indexes)
    return [sorted(g) for _, g in sorted(groups.items())]


def split_passes(streams: Sequence[tuple[int, int]]) -> list[int]:
    """The rows of each pass of a batch in which each (stream, rows) brings that many rows:
    one group per row count (``equal_groups``), each split wherever its streams skip one.
    On the AVX2 machine of ``docs/bench/serve``, 4 rows each on streams 0, 2, 4, 6 cost 738
    ms where on 0-3 they cost 568 (``one-off/batch_shapes.txt``)."""
    by_rows: dict[int, list[int]] = {}
    for stream, n in streams:
        if n:
            by_rows.setdefault(n, []).append(stream)
    out = []
    for n, ids in sorted(by_rows.items()):
        ids.sort()
        run = 1
        for a, b in pairwise(ids):
            if b != a + 1:
                out.append(run * n)
                run = 0
            run += 1
        out.append(run * n)
    return out


class FreeStreams:
    """The streams (llama.cpp seq ids) not in use. A live sequence takes the lowest, so live
    streams stay packed and a forward spans few; a kept cache (``park``) the highest."""

    def __init__(self, n: int, model: str = "the model") -> None:
        self._ids, self._n, self._model = list(range(n)), n, model  # a heap

    def __len__(self) -> int:
        return len(self._ids)

    def above(self, stream: int) -> bool:
        """Whether a stream above ``stream`` is free."""
        return max(self._ids, default=-1) > stream

    def below(self, stream: int) -> bool:
        """Whether a stream below ``stream`` is free."""
        return bool(self._ids) and self._ids[0] < stream

    def take(self, *, high: bool = False) -> int:
        if not self._ids:
            raise ModelError(
                f"all {self._n} llama.cpp sequence slots are in use ({self._model})",
                hint="release sequences you no longer need, or load the model with a larger n_seq_max",
            )
        if high:
            self._ids.sort()
            return self._ids.pop()  # a sorted list is still a heap
        return heapq.heappop(self._ids)

    def give(self, stream: int) -> None:
        heapq.heappush(self._ids, stream)
