"""``coinfer models`` as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.run import coinfer

CATALOGUE = {"smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma-3-270m"}


def test_models_list_json_shows_the_catalogue() -> None:
    proc = coinfer("models", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["name"] for r in rows} == CATALOGUE
    for r in rows:
        assert {"name", "path", "params", "vocab_size", "backend"} <= r.keys()
        assert r["path"] is None or Path(r["path"]).is_file()
    assert {r["name"]: r["vocab_size"] for r in rows}["qwen2.5-coder-1.5b"] == 151936


def test_models_info_verifies_the_file(smollm_path: Path) -> None:
    proc = coinfer("models", "info", "smollm2-135m", "--verify", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["path"] == str(smollm_path) and info["sha256_ok"] is True
