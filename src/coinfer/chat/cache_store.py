"""Finished conversations' caches kept in host memory (``LocalChat``'s store): what a
sequence slot no longer holds, copied out (``SteerableModel.save_state``) under a byte
budget, the least recently used copies going first, as llama-server's ``--cache-ram``
keeps its slots' prompts. A copy that a newer one extends (the same chat, a turn later)
goes when the newer one comes.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict

from coinfer.decoding.drafters import common_prefix
from coinfer.models.base import SeqState

__all__ = ["CacheStore"]


class CacheStore:
    """Copies of caches under ``budget`` bytes; ``nbytes``: what they take now (an int the
    HTTP side may read while the worker changes it)."""

    def __init__(self, budget: int) -> None:
        self.budget, self.nbytes = budget, 0
        self._copies = OrderedDict[int, SeqState]()  # least recently used first
        self._ids = itertools.count()

    def __len__(self) -> int:
        return len(self._copies)

    def add(self, state: SeqState) -> None:
        """Keep ``state`` (unless it alone is over the budget): the copies it extends go,
        then the least recently used until the budget holds."""
        if state.nbytes > self.budget:
            return
        for key, old in list(self._copies.items()):
            if len(old.tokens) <= len(state.tokens) and state.tokens[: len(old.tokens)] == old.tokens:
                self._pop(key)
        self._copies[next(self._ids)] = state
        self.nbytes += state.nbytes
        while self.nbytes > self.budget:
            self._pop(next(iter(self._copies)))

    def longest(self, prompt: list[int]) -> tuple[SeqState | None, int]:
        """The copy sharing the longest prefix with ``prompt``, and how long (None, 0: none)."""
        best, common = None, 0
        for state in self._copies.values():
            n = common_prefix(state.tokens, prompt)
            if n > common:
                best, common = state, n
        return best, common

    def used(self, state: SeqState) -> None:
        """``state`` was taken back: now the most recently used."""
        key = self._key(state)
        if key is not None:
            self._copies.move_to_end(key)

    def drop(self, state: SeqState) -> None:
        key = self._key(state)
        if key is not None:
            self._pop(key)

    def clear(self) -> None:
        self._copies.clear()
        self.nbytes = 0

    def _key(self, state: SeqState) -> int | None:
        return next((k for k, s in self._copies.items() if s is state), None)

    def _pop(self, key: int) -> None:
        self.nbytes -= self._copies.pop(key).nbytes
