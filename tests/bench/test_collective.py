from pathlib import Path

import pytest

from coinfer.bench.collective import (
    CollectiveBenchConfig,
    configurations,
    finish,
    markdown,
    measured_row,
    summarize,
)
from coinfer.decoding import DecodeStats, Response
from coinfer.errors import ConfigError


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


def _response(tokens: list[int], seconds: float, prefill_s: float = 1.0, stalled_s: float = 0.0) -> Response:
    """A request's response whose tokens after the first took ``seconds``, ``stalled_s`` of
    them waiting for other requests' prompts."""
    stats = DecodeStats(
        n_tokens=len(tokens), start=0.0, first_token_at=1.0, last_token_at=1.0 + seconds, stalled_s=stalled_s
    )
    return Response("", tokens, stats, "length", 0, {"prefill_s": prefill_s})


def test_with_repeats_the_fastest_run_counts_and_identity_needs_every_run() -> None:
    """Two runs of one configuration over two prompts (an edit, a prose): the row takes the
    run with the best decode rate, each request's fastest run per category, and counts a
    prompt identical to plain decoding only where both runs gave plain's tokens."""
    plain = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    slow = ([_response([1, 2, 3, 4, 5], 4.0), _response([6, 7, 8, 9, 10], 1.0)], 8.0)
    fast = ([_response([1, 2, 3, 4, 5], 1.0), _response([6, 7, 0, 9, 10], 2.0)], 4.0)
    row = measured_row("+majority", 1, [slow, fast], plain, ["edit", "prose"])
    assert row["runs"] == 2 and row["wall_s"] == 4.0
    assert row["decode_tokens_per_s"] == round(8 / 3, 3)  # 8 tokens after the first ones, 3 s
    assert row["by_category"] == {"edit": [4, 1.0, 0.0], "prose": [4, 1.0, 0.0]}  # each request's best
    assert row["identical"] == 1  # the prose prompt parted from plain in one run


def test_repeats_below_one_are_refused() -> None:
    with pytest.raises(ConfigError, match="repeats"):
        CollectiveBenchConfig(out="x", repeats=0)


def test_only_runs_plain_and_the_named_configurations() -> None:
    config = CollectiveBenchConfig(out="x", drafts=("a", "ngram"), only=("single:ngram", "+majority"))
    assert [name for name, _, _ in configurations(config)] == ["plain", "single:ngram", "+majority"]
    with pytest.raises(ConfigError, match="single:b"):
        CollectiveBenchConfig(out="x", drafts=("a",), only=("single:b",))


def test_a_requests_stalls_for_other_prompts_are_left_out_of_its_category_rate() -> None:
    """Inside a batch, a request waits while joining requests' prompts are read; when
    they join depends on when others finish, not on how this request was decoded. So a
    category's decode rate is its tokens over its seconds less those stalls (an old
    result's [tokens, seconds] still reads)."""
    plain = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
    runs = [([_response([1, 2, 3, 4, 5], 2.0), _response([6, 7, 8, 9, 10], 4.0, stalled_s=3.0)], 6.0)]
    row = measured_row("+majority", 4, runs, plain, ["edit", "prose"])
    assert row["by_category"] == {"edit": [4, 2.0, 0.0], "prose": [4, 4.0, 3.0]}
    old = {"edit": [4, 2.0], "prose": [4, 2.0]}  # an old result's rows
    base = {"config": "plain", "batch": 4, "tokens_per_s": 1.0, "by_category": old}
    config = CollectiveBenchConfig(out="x", drafts=("a",), batch_sizes=(4,), sweep=False)
    ratios = summarize([base, {**row, "tokens_per_s": 1.0}], config)["per_category"]["4"]["+majority"]
    assert ratios == {"edit": 1.0, "prose": 2.0}  # 4 tokens in 1 busy second against plain's 2
