"""Fuzzing the sandbox's static check and its format-template guard, in this process
(``child`` uses the standard library only): a parsed tree or a refusal, never a crash;
and a template the guard lets through never reaches a name that starts with ``_``."""

from __future__ import annotations

import ast
import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinfer.sandbox import child
from coinfer.sandbox.runner import DEFAULT_MODULES
from tests.fuzzing import hostile_text, within_deadline

pytestmark = pytest.mark.fuzz


@given(hostile_text)
def test_any_code_is_parsed_or_refused(code: str) -> None:
    try:
        tree = within_deadline(lambda: child.check_code(code, set(DEFAULT_MODULES)))
    except child.Refused as exc:
        assert str(exc)
    else:
        assert isinstance(child.guard_formats(tree), ast.Module)


@pytest.mark.parametrize("code", ["x = " + "+".join(["1"] * 900), "x = a" + ".b" * 300])
def test_code_that_parses_but_nests_past_the_checks_reach_is_refused(code: str) -> None:
    """Found by the long fuzz run: 900 terms of ``1+1+…`` parse, then exhausted the
    format rewrite's recursion (a RecursionError, not a refusal)."""
    with pytest.raises(child.Refused, match="nests more than"):
        child.check_code(code, set(DEFAULT_MODULES))


class Recorder:
    """Every attribute and item a format template asks of it, by name."""

    def __init__(self, seen: list[str]) -> None:
        object.__setattr__(self, "seen", seen)

    def __getattribute__(self, name: str) -> Any:
        object.__getattribute__(self, "seen").append(name)
        return Recorder(object.__getattribute__(self, "seen"))

    def __getitem__(self, key: Any) -> Any:
        object.__getattribute__(self, "seen").append(str(key))
        return Recorder(object.__getattribute__(self, "seen"))

    def __format__(self, spec: str) -> str:
        return "r"


_NAMES = st.sampled_from(["a", "b0", "_", "_a", "__class__", "__globals__", "x_", "0", "1"]) | st.text(
    max_size=6
)
_FIELD = st.builds(
    lambda first, path, spec: "{" + first + "".join(path) + spec + "}",
    st.sampled_from(["", "0", "1", "k"]),
    st.lists(st.one_of(_NAMES.map(lambda n: "." + n), _NAMES.map(lambda n: "[" + n + "]")), max_size=3),
    st.sampled_from(["", ":>4", ":{0._x}", ":{k.__class__}", "!r", "!s:{1}"]),
)
templates = st.lists(st.one_of(st.text(max_size=8), _FIELD), max_size=5).map("".join) | hostile_text


@given(templates)
def test_a_template_the_guard_passes_never_reaches_a_private_name(template: str) -> None:
    try:
        within_deadline(lambda: child.check_template(template))
    except ValueError:
        return  # refused, or not a template at all: str.format would raise the same
    seen: list[str] = []
    with contextlib.suppress(Exception):  # a missing index, a bad spec: only what it reached matters
        template.format(Recorder(seen), Recorder(seen), k=Recorder(seen))
    assert not [name for name in seen if name.startswith("_")]
