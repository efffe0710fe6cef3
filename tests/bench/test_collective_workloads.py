import json
from pathlib import Path

import pytest

from coinfer.bench.collective import CollectiveBenchConfig, run_collective_bench
from coinfer.bench.collective_workloads import merged_record, workload_figures
from coinfer.errors import ConfigError


def test_records_of_runs_one_after_another_sum_their_counts_and_join_their_rounds() -> None:
    first = {
        "drafts": ["ngram"],
        "verifications": 3,
        "prefill_s": 1.5,
        "pipelined_rounds": None,
        "rounds_drafting": {"ngram": 2},
        "s_history": [1, 2],
        "acceptance_by_draft": {"ngram": 0.5, "voted": None},
    }
    second = {
        "drafts": ["ngram"],
        "verifications": 4,
        "prefill_s": 0.5,
        "pipelined_rounds": None,
        "rounds_drafting": {"ngram": 1},
        "s_history": [3],
        "acceptance_by_draft": {"ngram": 0.9, "voted": 0.7},
    }
    merged = merged_record([first, second])
    assert merged["drafts"] == ["ngram"] and merged["verifications"] == 7 and merged["prefill_s"] == 2.0
    assert merged["rounds_drafting"] == {"ngram": 3} and merged["s_history"] == [1, 2, 3]
    assert merged["acceptance_by_draft"] == {"ngram": 0.7, "voted": 0.7}  # rates averaged where known
    assert merged["pipelined_rounds"] is None  # no run pipelined: still none, not 0


def test_each_categorys_figure_is_its_fastest_workload() -> None:
    slow = {"workloads": {"edit": [40, 4.0], "prose": [30, 2.0]}}
    fast = {"workloads": {"edit": [40, 2.0], "prose": [30, 3.0]}}
    assert workload_figures([slow, fast]) == {"edit": [40, 2.0, 0.0], "prose": [30, 2.0, 0.0]}
    assert workload_figures([{"verifications": 3}]) == {}  # a mixed run has no workloads


def test_category_workloads_run_each_category_alone_on_a_real_model(tmp_path: Path) -> None:
    """Two categories at batch 2: each category runs alone under every configuration in
    turn, its figure is that run's rate, and every prompt is still answered in suite
    order, identical to plain."""
    prompts = tmp_path / "prompts.jsonl"
    rows = [
        {"id": f"{c}{i}", "category": c, "messages": [{"role": "user", "content": f"{c} {i}: say hello"}]}
        for c in ("edit", "prose")
        for i in range(2)
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = CollectiveBenchConfig(out=str(tmp_path / "out"), target="smollm2-135m", drafts=("ngram",),
                                   batch_sizes=(2,), max_tokens=6, prompts=str(prompts), sweep=False,
                                   only=("single:ngram",), category_workloads=True)  # fmt: skip
    lines: list[str] = []
    report = run_collective_bench(config, log=lines.append)
    runs = [line.rsplit(":", 1)[0] for line in lines if line.endswith(" s")]
    # every configuration runs a category before the next category starts
    assert runs == [
        "batch 2 edit plain",
        "batch 2 edit single:ngram",
        "batch 2 prose plain",
        "batch 2 prose single:ngram",
    ]
    rows_by = {r["config"]: r for r in report["rows"]}
    plain, single = rows_by["plain"], rows_by["single:ngram"]
    assert set(plain["by_category"]) == {"edit", "prose"} and single["identical"] == 4
    for category, (tokens, seconds, stalled) in plain["by_category"].items():
        assert 0 < tokens <= 2 * 5 and seconds > 0 and stalled == 0.0, category
    assert plain["output_tokens"] == sum(t for t, _, _ in plain["by_category"].values()) + 4
    assert set(report["summary"]["per_category"]["2"]["single:ngram"]) == {"edit", "prose"}
    assert "workload of their own" in (tmp_path / "out" / "results.md").read_text()


def test_fewer_than_one_prompt_per_category_is_refused() -> None:
    with pytest.raises(ConfigError, match="per_category"):
        CollectiveBenchConfig(out="x", per_category=0)
