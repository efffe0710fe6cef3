"""The speculative workload suite and user-supplied prompt files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coinfer.bench.workloads import CATEGORIES, build_suite, load_prompts
from coinfer.errors import ConfigError


def test_the_suite_has_every_category_and_real_content() -> None:
    suite = build_suite(3)
    assert [p["category"] for p in suite].count("edit") == 3 and len(suite) == 9
    assert {p["category"] for p in suite} == set(CATEGORIES)
    assert len({p["id"] for p in suite}) == 9
    edit = next(p for p in suite if p["category"] == "edit")["messages"][0]["content"]
    assert "Return the full code" in edit and "def " in edit and "return" in edit
    grounded = next(p for p in suite if p["category"] == "grounded")["messages"][0]["content"]
    assert "Python documentation" in grounded and len(grounded) > 1000
    assert build_suite(3) == suite  # deterministic


def test_prompt_files_are_read_and_checked(tmp_path: Path) -> None:
    good = tmp_path / "p.jsonl"
    good.write_text(
        json.dumps({"id": "a", "category": "edit", "messages": [{"role": "user", "content": "x"}]}) + "\n\n"
    )
    assert load_prompts(good)[0]["id"] == "a"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n')
    with pytest.raises(ConfigError, match="bad.jsonl:1"):
        load_prompts(bad)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="no prompts"):
        load_prompts(tmp_path / "empty.jsonl")
