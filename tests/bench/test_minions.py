"""The minions benchmark's workload and its arithmetic (the full run needs the real models)."""

from __future__ import annotations

import re

import pytest

from coinfer.bench.minions import (
    MinionsBenchConfig,
    by_document,
    is_correct,
    load_questions,
    results_markdown,
    summarize,
)
from coinfer.errors import ConfigError


def test_the_committed_workload_is_long_real_documents_with_checkable_answers() -> None:
    questions = load_questions()
    assert len(questions) >= 30
    docs = {q["doc"]: q["text"] for q in questions}
    assert len(docs) >= 8 and all(12_000 <= len(t) <= 64_000 for t in docs.values())  # about 3k-16k tokens
    for q in questions:
        assert is_correct(q["answer"], q["pattern"]), q["id"]
        assert not is_correct("I could not find it.", q["pattern"]) or q["pattern"] in (r"\bError\b",), q[
            "id"
        ]
        assert re.search(q["pattern"], q["text"], re.I) or q["answer"] in q["text"], q["id"]


def test_a_limited_run_spans_several_documents() -> None:
    picked = load_questions(limit=5)
    assert len(picked) == 5 and len({q["doc"] for q in picked}) == 5


def test_each_documents_questions_are_asked_together_and_none_is_lost() -> None:
    questions = load_questions(7)  # round-robin: several documents, interleaved
    groups = by_document(questions)
    assert sorted(q["id"] for g in groups for q in g) == sorted(q["id"] for q in questions)
    assert all(len({q["doc"] for q in g}) == 1 for g in groups)
    assert len({g[0]["doc"] for g in groups}) == len(groups)


def test_the_summary_compares_every_protocol_with_remote_only() -> None:
    def row(protocol: str, correct: bool, prefill: int, decode: int, cost: float, best_effort: bool) -> dict:  # type: ignore[type-arg]
        return {
            "protocol": protocol,
            "correct": correct,
            "remote_prompt_tokens": prefill,
            "remote_completion_tokens": decode,
            "cost_usd": cost,
            "best_effort": best_effort,
            "wall_s": 1.0,
        }

    rows = [
        row("remote-only", True, 10_000, 10, 0.025, False),
        row("remote-only", True, 6_000, 10, 0.015, False),
        row("minions", True, 1_000, 200, 0.0045, False),
        row("minions", False, 1_400, 220, 0.0057, True),
    ]
    s = summarize(rows, ("remote-only", "minions", "minion"))
    assert set(s) == {"remote-only", "minions"}
    assert s["minions"]["accuracy"] == 0.5 and s["minions"]["accuracy_vs_remote_only"] == 0.5
    assert s["minions"]["prefill_vs_remote_only"] == pytest.approx(1_200 / 8_000, abs=1e-4)
    concurrency = {"jobs": 8, "sequential_jobs_per_s": 0.17, "parallel_jobs_per_s": 0.2, "speedup": 1.18}
    concurrency |= {"prefill_share": 0.74, "prompt_tokens": 6100, "completion_tokens": 410}
    table = results_markdown({"summary": s, "concurrency": concurrency}, MinionsBenchConfig(out="x"))
    assert "| minions | 2 | 50% | 1,200 |" in table and "1.18x" in table and "took 74%" in table
    assert s["minions"]["best_effort"] == 1


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown protocols"):
        MinionsBenchConfig(out="x", protocols=("remote-only", "telepathy"))
    with pytest.raises(ConfigError):
        MinionsBenchConfig(out="x", limit=0)
