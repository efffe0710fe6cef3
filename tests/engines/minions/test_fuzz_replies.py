"""Fuzzing what the local and remote models reply (JSON answers, decisions, job code):
the parsers give a result or None, never an exception, and within a deadline."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinfer.engines.minions.code_tidy import TidyCode, tidy_job_code
from coinfer.engines.minions.parsing import json_object, python_code
from coinfer.sandbox.runner import DEFAULT_MODULES
from tests.fuzzing import hostile_text, json_values, within_deadline

pytestmark = pytest.mark.fuzz


@given(hostile_text)
def test_any_reply_gives_a_json_object_or_none(text: str) -> None:
    value = within_deadline(lambda: json_object(text))
    assert value is None or isinstance(value, dict)


@given(st.text(alphabet=st.characters(blacklist_characters="{"), max_size=200),
       st.dictionaries(st.text(max_size=12), json_values, max_size=6), st.text(max_size=200))  # fmt: skip
def test_an_object_inside_prose_is_found_whole(before: str, obj: dict, after: str) -> None:
    """A reply that is prose, then a JSON object, then anything: that object comes back."""
    text = before + json.dumps(obj) + after
    assert within_deadline(lambda: json_object(text)) == obj


@pytest.mark.parametrize("reply", ["`" * 200_000, "```" * 60_000 + "\n", "x```" * 50_000])
def test_a_reply_of_backticks_is_read_in_linear_time(reply: str) -> None:
    """Found by fuzzing: an unbounded fence info string made 20,000 backticks take 0.6 s
    and 200,000 about a minute."""
    code = within_deadline(lambda: python_code(reply))
    assert code is None or "```" not in code  # a fence's marks are never part of the code
    assert within_deadline(lambda: json_object(reply)) is None


@given(hostile_text)
def test_any_reply_gives_python_code_or_none(text: str) -> None:
    code = within_deadline(lambda: python_code(text))
    assert code is None or isinstance(code, str)


@given(hostile_text)
def test_any_job_code_is_tidied_or_left_for_the_sandbox_to_refuse(code: str) -> None:
    tidy = within_deadline(lambda: tidy_job_code(code, DEFAULT_MODULES))
    assert isinstance(tidy, TidyCode) and isinstance(tidy.code, str)
