"""Outline decoding's words (paper 004 §V-B): reading an outline, assembling the answer in
its order, and the router's choice between outline and sequential decoding."""

from __future__ import annotations

from coinfer.engines.jupiter.outline import assemble, parse_outline, point_end, route, whole_sentences


def test_an_outline_is_read_as_its_numbered_points_in_order() -> None:
    text = "1. **Sleep schedule**:\n2. Less light\n3. Exercise\n\nThese help."
    assert parse_outline(text) == ["Sleep schedule", "Less light", "Exercise"]
    assert parse_outline("1. a\n3. c") == ["a"]  # numbering must run on
    assert parse_outline("Here is how to do it.") == []


def test_the_answer_keeps_the_outlines_order_and_cuts_points_that_run_on() -> None:
    expansions = [" Go to bed on time.", " Dim the lights.\n3. Exercise daily"]
    assert point_end(expansions[1]) == len(" Dim the lights.")
    assert point_end(" Version 2.5 of it") is None
    assert point_end(" Dim it.\n3") == len(" Dim it.")  # the next number, cut before its dot
    assert (
        assemble(["Sleep", "Light"], expansions)
        == "1. **Sleep**: Go to bed on time.\n2. **Light**: Dim the lights."
    )


def test_a_point_cut_off_by_its_budget_ends_at_its_last_whole_sentence() -> None:
    said = " Aim for 7-9 hours (or 7.5) a night. Keep a routine! Avoid screens and"
    assert whole_sentences(said) == " Aim for 7-9 hours (or 7.5) a night. Keep a routine!"
    assert whole_sentences(" Reduce alcohol.\n   - Limit smoking to") == " Reduce alcohol."
    assert whole_sentences(" Eat less sugar and") == " Eat less sugar and"  # no sentence: kept


def test_the_router_falls_back_on_code_math_and_short_answers() -> None:
    humaneval = (
        "from typing import List\n\ndef has_close_elements(numbers: List[float]) -> bool:\n"
        '    """ Check if in given list of numbers, are any two numbers closer to each other."""\n'
    )
    for question in [
        humaneval,
        "Write a Python function that merges two sorted lists.",
        "What is 17 * 23?",
        "Solve x^2 - 5x + 6 = 0.",
        "Translate 'good morning' into French.",
        "Who wrote Hamlet?",
        "Write a haiku about autumn.",
    ]:
        assert not route(question).outline, question


def test_the_router_takes_the_outline_for_questions_of_several_parts() -> None:
    for question in [
        "What are some tips for improving sleep quality?",
        "Compare electric cars and gasoline cars.",
        "How can I prepare for a job interview?",
        "What are the pros and cons of remote work?",
    ]:
        decision = route(question)
        assert decision.outline and decision.reason, question
