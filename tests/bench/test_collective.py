from pathlib import Path

import pytest

from coinfer.bench.collective import CollectiveBenchConfig, finish, markdown, summarize


def _row(config: str, batch: int, tps: float, voted: float | None = 0.5, edit_s: float = 10.0) -> dict:
    return {
        "config": config,
        "batch": batch,
        "tokens_per_s": tps,
        "normalized_latency_s": 1 / tps,
        "identical": None if config == "plain" else 2,
        "acceptance": {"a": 0.4, "voted": voted},
        "by_category": {"edit": [100, edit_s], "prose": [100, 10.0]},  # tokens, seconds
    }


def _rows() -> list[dict]:
    return [
        _row("plain", 1, 10.0),
        _row("single:a", 1, 12.0),
        _row("default", 1, 12.0),
        _row("+majority", 1, 14.0, edit_s=5.0),
        _row("+selector", 1, 15.0, edit_s=11.0),
        _row("+pipeline", 1, 18.0),
        _row("plain", 4, 20.0),
        _row("+selector", 4, 30.0),
        _row("sweep:s=1", 4, 25.0),
        _row("sweep:s=2", 4, 32.0),
    ]


def test_the_summary_holds_ratios_to_plain_the_ablation_and_the_sweep() -> None:
    config = CollectiveBenchConfig(out="x", drafts=("a", "b"), batch_sizes=(1, 4), sweep_batch=4)
    rows = _rows()
    s = summarize(rows, config)
    assert s["throughput_ratio_vs_plain"]["1"]["+pipeline"] == 1.8
    assert s["throughput_ratio_vs_plain"]["4"] == {"+selector": 1.5}
    assert s["ablation"]["1"] == {"default": 12.0, "+majority": 14.0, "+selector": 15.0, "+pipeline": 18.0}
    assert s["sweep"]["selector_vs_best_fixed"] == round(30 / 32, 3)
    assert s["acceptance"]["1"] == {"a": 0.4, "b": None, "voted": 0.5}  # each draft alone, and voted
    assert s["per_category"]["1"]["+majority"] == {"edit": 2.0, "prose": 1.0}
    assert s["targets"]["1"] == {
        "majority_vs_best_single": round(14 / 12, 3),
        "voted_acceptance_minus_best_single": 0.1,
        # a stage faster overall can still be slower than plain on one category
        "worst_vs_plain": {"ratio": 0.909, "config": "+selector", "where": "edit"},
        "pipeline_vs_selector": 1.2,
        "copy_categories": {
            "+majority": {"edit": 2.0},
            "+selector": {"edit": 0.909},
            "+pipeline": {"edit": 1.0},
        },
    }
    table = markdown({"rows": rows, "summary": s})
    assert "| 1 | +majority | 14.0 |" in table and "| 2.00x | 1.00x |" in table
    assert table.count("\n") == len(rows) + 6


def test_finish_writes_the_results_and_three_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    config = CollectiveBenchConfig(out=str(tmp_path), drafts=("a", "b"), batch_sizes=(1, 4), sweep_batch=4)
    finish({"rows": _rows()}, config, tmp_path)
    assert (tmp_path / "results.json").is_file() and (tmp_path / "results.md").is_file()
    for name in ("throughput", "sweep", "acceptance"):
        assert (tmp_path / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
