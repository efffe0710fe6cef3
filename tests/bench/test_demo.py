"""``coinfer demo``'s rows: the speculative family run for real (SmolLM2 as target and
draft, so it is quick), a failing command as a row that says why, and the table."""

from __future__ import annotations

from pathlib import Path

from coinfer.bench.demo import DemoConfig, Row, demo_table, speculative_rows
from coinfer.decoding.trace import load_trace
from tests.conftest import needs_llama


@needs_llama
def test_the_speculative_engines_run_beside_plain_decoding(smollm_path: Path, tmp_path: Path) -> None:
    config = DemoConfig(out=tmp_path, quick=True, target="smollm2-135m", draft="smollm2-135m")
    rows = speculative_rows(config)
    assert [r.engine for r in rows] == ["speculative", "collective", "llmcad"]
    for row in rows:
        assert row.error is None and row.ratio is not None and row.ratio > 0
        assert row.runs["baseline"]["drafted"] == 0 and row.runs["engine"]["n_tokens"] > 0
        trace = load_trace(row.trace or "")
        assert trace["engine"] == row.engine and trace["stats"] == row.runs["engine"]


def test_a_command_that_fails_gives_its_rows_the_reason(tmp_path: Path) -> None:
    rows = speculative_rows(DemoConfig(out=tmp_path, target="no-such-model", timeout_s=120))
    assert len(rows) == 3 and all(r.error and "no-such-model" in r.error for r in rows)
    table = demo_table([*rows, Row("minions", "answered '#'", "remote-only m", "remote tokens", 0.59)])
    lines = table.splitlines()
    assert lines[1].split()[:2] == ["speculative", "plain"] and "failed" in lines[1]
    assert "0.59x" in lines[4] and "remote tokens" in lines[4]
