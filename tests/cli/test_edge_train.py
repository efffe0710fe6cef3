"""``coinfer edge train-heads`` as a user runs it, on a tiny random model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.run import assert_user_error, coinfer
from tests.conftest import needs_torch

pytestmark = needs_torch


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coinfer.testing import tiny_hf_model_dir

    return tiny_hf_model_dir(tmp_path_factory.mktemp("train") / "m", arch="qwen2", seed=2, context=4096)


def _train(model: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    small = ("--prompts", "3", "--held-out", "2", "--max-tokens", "12", "--heads", "3", "--quiet")
    return coinfer(
        "edge", "train-heads", "-m", str(model), "--out", str(out), "-b", "transformers", *small, *extra
    )


def test_train_heads_writes_heads_with_a_held_out_accuracy_and_resumes(tiny: Path, tmp_path: Path) -> None:
    from coinfer.models.heads import DraftHeads, config_digest

    proc = _train(tiny, tmp_path / "heads")
    assert proc.returncode == 0, proc.stderr
    assert "held-out top-1 accuracy per head" in proc.stderr
    meta = json.loads((tmp_path / "heads" / "heads.json").read_text())
    assert len(meta["accuracy"]) == 3 and all(0.0 <= a <= 1.0 for a in meta["accuracy"])
    assert meta["trained"]["prompts"] == 3 and meta["trained"]["positions"] > 0
    heads = DraftHeads.load(tmp_path / "heads", digest=config_digest(tiny))
    assert heads.k == 3
    answers = {p.name: p.read_text() for p in (tmp_path / "heads" / "work").glob("answers-*.jsonl")}
    assert len(answers) == 2 and all(len(t.splitlines()) in (2, 3) for t in answers.values())
    again = _train(tiny, tmp_path / "heads")  # resumes: the answers are not written again
    assert again.returncode == 0, again.stderr
    assert {p.name: p.read_text() for p in (tmp_path / "heads" / "work").glob("answers-*.jsonl")} == answers


def test_bad_numbers_are_refused_in_one_line(tiny: Path, tmp_path: Path) -> None:
    assert_user_error(_train(tiny, tmp_path / "h", "--heads", "0"), "--heads")
