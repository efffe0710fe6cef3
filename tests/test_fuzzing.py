"""The fuzz tests' deadline: the parser's own CPU time, not the machine's load."""

import time

import pytest

from tests.fuzzing import within_deadline


def _spin(seconds: float, *, sleep_first: float = 0.0) -> str:
    time.sleep(sleep_first)
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
    return "parsed"


def test_a_parse_that_works_past_its_deadline_fails() -> None:
    with pytest.raises(AssertionError, match="of CPU"):
        within_deadline(lambda: _spin(0.2), limit_s=0.1)


def test_waiting_is_not_counted_and_the_result_comes_back() -> None:
    """Time the test's thread does not run (another process on the cores, here a sleep)
    is not the parser's work."""
    assert within_deadline(lambda: _spin(0.01, sleep_first=0.2), limit_s=0.1) == "parsed"
