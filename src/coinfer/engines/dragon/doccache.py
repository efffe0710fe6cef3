"""Each side's documents' KV caches, kept across questions (paper 003 §1: the KVs of
documents are pre-computed and kept next to the corpus, on the side that owns it).

A document's sequence starts with the document and ends with the question
(``side.document_prompt``), so what one answer computed for a document serves the next
answer that reads it. After a side has read its documents, ``DocumentCache.keep`` forks
each document's sequence (llama.cpp shares the cells: nothing is copied or recomputed)
and keeps the fork, frozen at the prompt's end. ``DocumentCache.open`` starts a new
answer's sequences: for each prompt, the kept sequence sharing the longest start with it
is forked and cut back to that common start, and only the rest (in the end the new
question) is left to read. Kept sequences are released oldest first when more than
``capacity`` are kept, when they hold more than ``max_cells`` tokens together, or when
an answer needs their sequence slots. Answers served at once on several threads may
share one cache: each call takes its turn.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

from coinfer.decoding.drafters import common_prefix
from coinfer.models.base import Seq, SteerableModel

__all__ = ["DocumentCache"]

MIN_SHARED = 8  # a shorter common start is not worth a fork


class DocumentCache:
    """Prompts' sequences kept for reuse on one model (keyed by the prompt's tokens)."""

    def __init__(self, model: SteerableModel, *, capacity: int = 8, max_cells: int | None = None) -> None:
        self.model = model
        self.capacity = capacity
        self.max_cells = model.n_ctx // 4 if max_cells is None else max_cells
        self._kept: OrderedDict[tuple[int, ...], Seq] = OrderedDict()
        self.hits = 0  # tokens not read again, over every answer
        self._turn = threading.RLock()

    @property
    def cells(self) -> int:
        """Tokens the kept sequences hold (what they take of a shared cache's cells)."""
        with self._turn:
            return sum(len(k) for k in self._kept)

    def open(self, prompts: Sequence[list[int]]) -> list[tuple[Seq, list[int]]]:
        """A sequence per prompt and the tokens it has still to read: forked from the kept
        sequence sharing the longest start with the prompt (at least ``MIN_SHARED``
        tokens, never the whole prompt: its last token is read to give the next logits),
        else new."""
        with self._turn:
            return self._open(prompts)

    def _open(self, prompts: Sequence[list[int]]) -> list[tuple[Seq, list[int]]]:
        self._make_room(len(prompts))
        out: list[tuple[Seq, list[int]]] = []
        for prompt in prompts:
            key, shared = self._best(prompt)
            if key is None:
                out.append((self.model.new_sequence(), list(prompt)))
                continue
            self._kept.move_to_end(key)
            seq = self.model.fork(self._kept[key])
            self.model.truncate(seq, shared)
            self.hits += shared
            out.append((seq, list(prompt[shared:])))
        return out

    def keep(self, prompts: Sequence[list[int]], seqs: Sequence[Seq]) -> None:
        """Keep a fork of each sequence as it stands at its prompt's end (call right after
        the prompts were read, before anything is generated)."""
        with self._turn:
            self._keep(prompts, seqs)

    def _keep(self, prompts: Sequence[list[int]], seqs: Sequence[Seq]) -> None:
        for prompt, seq in zip(prompts, seqs, strict=True):
            key = tuple(prompt)
            if key in self._kept:
                self._kept.move_to_end(key)
                continue
            self._kept[key] = self.model.fork(seq)
        self._evict(lambda: len(self._kept) > self.capacity or self.cells > self.max_cells)

    def clear(self) -> None:
        with self._turn:
            self._evict(lambda: bool(self._kept))

    def close(self) -> None:
        """Release every kept sequence (its session ended)."""
        self.clear()

    def _best(self, prompt: Sequence[int]) -> tuple[tuple[int, ...] | None, int]:
        best: tuple[tuple[int, ...] | None, int] = (None, 0)
        for key in self._kept:
            shared = min(common_prefix(key, prompt), len(prompt) - 1)
            if shared >= MIN_SHARED and shared > best[1]:
                best = (key, shared)
        return best

    def _make_room(self, needed: int) -> None:
        """Release kept sequences until ``needed`` more sequences fit the model's slots
        (each answer's sequences come first)."""
        limit = self.model.max_sequences
        if limit is not None:
            self._evict(lambda: bool(self._kept) and self.model.live_sequences + needed > limit)

    def _evict(self, while_: Callable[[], bool]) -> None:
        while while_():
            _, seq = self._kept.popitem(last=False)
            self.model.release(seq)
