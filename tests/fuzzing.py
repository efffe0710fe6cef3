"""Strategies and checks the fuzz tests share: hostile text, JSON values, a time bound."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

DEADLINE_S = 2.0  # the longest one parse of one input may take

# shapes that exhaust parsers: deep nesting, long runs, NULs, lone surrogates, huge lines
_RUNS = ("[", "{", "(", "-", "not ", '{"a": ', "```python\n", "`", "'", "\\", "\x00", "\ud800", "{0.", "}")
hostile_text = st.one_of(
    st.text(),
    st.text(st.characters(codec="utf-8")),
    st.builds(lambda run, n: run * n, st.sampled_from(_RUNS), st.integers(1, 200_000)),
    st.builds(
        lambda a, run, n, b: a + run * n + b,
        st.text(max_size=50),
        st.sampled_from(_RUNS),
        st.integers(1, 20_000),
        st.text(max_size=50),
    ),  # fmt: skip
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
    max_leaves=30,
)


def within_deadline(call: Callable[[], T], limit_s: float = DEADLINE_S) -> T:
    """``call()``, failing the test if it took longer than ``limit_s``."""
    started = time.perf_counter()
    out = call()
    elapsed = time.perf_counter() - started
    assert elapsed < limit_s, f"took {elapsed:.1f} s"
    return out
