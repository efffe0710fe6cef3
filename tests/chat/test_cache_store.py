"""The store of finished conversations' caches in host memory: a byte budget, least
recently used first, and a chat's later turn in place of its earlier one."""

from __future__ import annotations

from coinfer.chat.cache_store import CacheStore
from coinfer.models.base import SeqState


def _state(tokens: list[int]) -> SeqState:
    return SeqState(tuple(tokens), bytes(10 * len(tokens)))  # ten bytes a token


def test_the_longest_shared_prefix_is_found_and_the_least_recently_used_goes_first() -> None:
    store = CacheStore(budget=90)
    a, b = _state([1, 2, 3, 4]), _state([5, 6, 7])
    store.add(a)
    store.add(b)
    assert store.nbytes == 70 and store.longest([1, 2, 3, 9]) == (a, 3)
    assert store.longest([8]) == (None, 0)
    store.used(a)  # taken back: b is now the least recently used
    c = _state([9, 9, 9])
    store.add(c)
    assert store.longest([5, 6, 7]) == (None, 0) and store.nbytes == 70 and len(store) == 2


def test_a_later_turn_replaces_the_earlier_and_nothing_outgrows_the_budget() -> None:
    store = CacheStore(budget=100)
    store.add(_state([1, 2, 3]))
    later = _state([1, 2, 3, 4, 5])
    store.add(later)
    assert len(store) == 1 and store.nbytes == 50 and store.longest([1, 2, 3])[0] is later
    store.add(_state(list(range(11))))  # 110 bytes: over the budget alone, not kept
    assert len(store) == 1
    store.drop(later)
    assert len(store) == 0 and store.nbytes == 0
