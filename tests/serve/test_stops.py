"""Stop strings: the text ends before the first, and a stream never shows part of one."""

from __future__ import annotations

from coinfer.serve.stops import StopScanner


def test_text_that_may_begin_a_stop_string_is_held_until_it_is_known() -> None:
    s = StopScanner(["\n\n", "END"])
    assert s.push("one two E") == ("one two ", False)  # "E" may begin "END"
    assert s.push("ND and more") == ("", True)
    assert s.push("ignored") == ("", True)


def test_a_false_start_is_shown_once_it_is_known_and_the_rest_at_the_end() -> None:
    s = StopScanner(["END"])
    assert s.push("the EN") == ("the ", False)
    assert s.push("ough") == ("ENough", False)
    assert s.push(" E", final=True) == (" E", False)


def test_no_stop_strings_pass_everything() -> None:
    assert StopScanner([]).push("a\n\nb") == ("a\n\nb", False)
