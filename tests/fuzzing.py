"""Strategies and checks the fuzz tests share: hostile text, JSON values, a time bound."""

from __future__ import annotations

import gc
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
    """``call()``, failing the test if it took longer than ``limit_s`` of this thread's CPU.

    CPU time, with the garbage collector paused, is the parser's own work: a hang or a
    quadratic blow-up shows in it, while another process on the two cores or a collection
    of the test runner's heap does not (the 30-minute run once saw 3 s of wall time for a
    parse that takes 3 ms alone)."""
    gc_was_on = gc.isenabled()
    gc.disable()
    started_cpu, started_wall = time.thread_time(), time.perf_counter()
    try:
        out = call()
    finally:
        if gc_was_on:
            gc.enable()
    cpu, wall = time.thread_time() - started_cpu, time.perf_counter() - started_wall
    assert cpu < limit_s, f"took {cpu:.1f} s of CPU ({wall:.1f} s of wall time)"
    return out
