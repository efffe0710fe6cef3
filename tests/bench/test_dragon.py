"""``coinfer bench dragon`` end to end on SmolLM2: real cloud and device processes through
the latency relay, every system measured, the summary the issue asks for."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from coinfer.bench.dragon import SYSTEMS, DragonBenchConfig, load_questions, run_dragon_bench, summarize
from coinfer.errors import ConfigError
from tests.conftest import HAS_LLAMA, HAS_TORCH


def test_the_built_in_questions_need_both_sides() -> None:
    questions = load_questions(None, None)
    assert len(questions) >= 6
    for q in questions:
        device, cloud = " ".join(q["device"].values()), " ".join(q["cloud"].values())
        assert q["facts"]["device"] in device and q["facts"]["device"] not in cloud, q["id"]
        assert q["facts"]["cloud"] in cloud and q["facts"]["cloud"] not in device, q["id"]


def test_a_question_file_without_both_corpora_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "q.jsonl"
    bad.write_text(json.dumps({"id": "x", "question": "?", "device": {}}) + "\n")
    with pytest.raises(ConfigError, match="needs id"):
        load_questions(str(bad), None)


@pytest.mark.skipif(
    not (HAS_LLAMA and HAS_TORCH) or importlib.util.find_spec("grpc") is None,
    reason="needs the llama, torch, rag and net extras",
)
def test_a_quick_run_measures_every_system_over_a_delayed_link(tmp_path: Path, smollm_path: Path) -> None:
    """Every system, each a real process, the linked ones through the latency relay (one
    delay: each system at each delay is a process of its own; the per-delay summary is
    tested apart below)."""
    config = DragonBenchConfig(
        out=str(tmp_path), model="smollm2-135m", max_tokens=12, delays=(0.1,), limit=1, workloads=("qa",)
    )
    report = run_dragon_bench(config, log=lambda _: None)
    s = report["summary"]
    assert s["failed"] == []
    assert {r["system"] for r in report["runs"]} == set(SYSTEMS)
    assert set(s["latency_reduction_vs_tw"]) == {"0.1"} and s["latency_reduction_vs_tw"]["0.1"] is not None
    assert all(v is not None for v in s["ttft_ratio_vs_device_only"].values())
    linked = [r for r in report["runs"] if r["delay_s"] is not None]
    assert all(r["fallback"] is None and r["accepted"] for r in linked)
    assert (tmp_path / "results.json").is_file() and "DRDG/TW" in (tmp_path / "results.md").read_text()
    assert s["live_over_best_fixed"]["0.1"] is not None
    assert all(v is not None for v in s["both_reduction_vs_tw"].values())
    assert "Both sides aggregating" in (tmp_path / "results.md").read_text()


def test_the_summary_compares_the_systems_at_each_delay_apart() -> None:
    def row(system: str, delay: float | None, latency: float) -> dict[str, object]:
        facts = {"device": True, "cloud": delay is not None}
        return {
            "system": system,
            "delay_s": delay,
            "id": "q",
            "latency_s": latency,
            "ttft_s": 1.0,
            "facts": facts,
        }

    latency = {"drdg-tw": 0.2, "dragon-device": 0.15, "dragon-cloud": 0.1, "dragon-live": 0.12}
    rows = [row(s, None, 0.05) for s in ("device-only", "cloud-only")]
    rows += [row(s, d, v * (1 + d)) for d in (0.0, 0.3) for s, v in latency.items()]
    failed = {"system": "dragon-both", "delay_s": 0.3, "id": "q", "error": "the cloud went away"}
    rows.append(failed)
    s = summarize(rows, (0.0, 0.3))
    assert s["latency_reduction_vs_tw"] == {"0.0": 0.5, "0.3": 0.5}  # the better side, cloud, over TW
    assert s["live_over_best_fixed"] == {"0.0": 1.2, "0.3": 1.2}
    assert s["both_reduction_vs_tw"] == {"0.0": None, "0.3": None}  # dragon-both never answered
    assert s["failed"] == [failed]
    both = s["answers_with_both_facts"]  # the sides alone miss the other side's fact
    assert both["drdg-tw"] == 1.0 and both["device-only"] == 0.0 and both["dragon-both"] is None


def test_unknown_systems_are_refused_before_anything_runs(tmp_path: Path) -> None:
    config = DragonBenchConfig(
        out=str(tmp_path), systems=("dragon-both", "dragon-everywhere"), workloads=("qa",)
    )
    with pytest.raises(ConfigError, match="unknown systems"):
        run_dragon_bench(config, log=lambda _: None)
    assert not (tmp_path / "results.json").exists()
