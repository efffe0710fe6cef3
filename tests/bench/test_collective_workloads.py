import json
from pathlib import Path

import pytest

from coinfer.bench.collective import CollectiveBenchConfig, run_collective_bench, summarize
from coinfer.bench.collective_workloads import merged_record, paired_ratios, workload_figures
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
    """Two categories at batch 2, twice: each category runs alone under every
    configuration in turn, both repeats (the second in reverse order) before the next
    category; its figure is the median of each repeat's ratio to plain, and every prompt
    is still answered in suite order, identical to plain."""
    prompts = tmp_path / "prompts.jsonl"
    rows = [
        {"id": f"{c}{i}", "category": c, "messages": [{"role": "user", "content": f"{c} {i}: say hello"}]}
        for c in ("edit", "prose")
        for i in range(2)
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = CollectiveBenchConfig(out=str(tmp_path / "out"), target="smollm2-135m", drafts=("ngram",),
                                   batch_sizes=(2,), max_tokens=6, prompts=str(prompts), sweep=False,
                                   only=("single:ngram",), category_workloads=True, repeats=2)  # fmt: skip
    lines: list[str] = []
    report = run_collective_bench(config, log=lines.append)
    runs = [line.rsplit(":", 1)[0] for line in lines if line.endswith((" s", "near its runs"))]
    assert runs == [
        step
        for category in ("edit", "prose")
        for step in [
            *(
                f"batch 2 {category} {name} run {repeat}"
                for repeat, names in ((1, ("plain", "single:ngram")), (2, ("single:ngram", "plain")))
                for name in names
            ),
            f"batch 2 {category}",  # then its near price table, before the next category
        ]
    ]
    rows_by = {r["config"]: r for r in report["rows"]}
    plain, single = rows_by["plain"], rows_by["single:ngram"]
    assert set(plain["by_category"]) == {"edit", "prose"} and single["identical"] == 4
    for category, (tokens, seconds, stalled) in plain["by_category"].items():
        assert 0 < tokens <= 2 * 5 and seconds > 0 and stalled == 0.0, category
    assert plain["output_tokens"] == sum(t for t, _, _ in plain["by_category"].values()) + 4
    assert 0 < plain["verify_s"] < plain["wall_s"]  # the target's verifying forwards: part of the wall time
    repeats = report["summary"]["repeats"]["2"]
    paired = repeats["per_category_ratios"]["single:ngram"]
    assert set(paired) == {"edit", "prose"} and all(len(v) == 2 for v in paired.values())
    per_category = report["summary"]["per_category"]["2"]["single:ngram"]
    assert per_category == {c: round(sum(v) / 2, 3) for c, v in paired.items()}  # the median of two
    assert set(repeats["plain_fastest_over_slowest"]) == {"edit", "prose"}
    assert "median of each repeat's ratio" in (tmp_path / "out" / "results.md").read_text()
    # every run's forwards, priced by one table of the target's forward times
    forwards = plain["forwards_by_category_runs"]
    assert set(forwards) == {"edit", "prose"} and all(len(v) == 2 for v in forwards.values())
    assert sum(forwards["edit"][0].values()) >= 4  # at least a forward per token after the first
    shapes = plain["shapes_by_category_runs"]  # the same forwards by rows x tokens
    for category, runs in forwards.items():
        for sizes, by_shape in zip(runs, shapes[category], strict=True):
            by_tokens: dict[str, int] = {}
            for key, count in by_shape.items():
                rows, tokens = map(int, key.split("x"))
                assert 1 <= rows <= 2 and rows <= tokens
                by_tokens[str(tokens)] = by_tokens.get(str(tokens), 0) + count
            assert by_tokens == sizes
    priced = report["summary"]["priced"]["2"]
    seen = {key for r in rows_by.values() for f in r["forward_shapes_runs"] for key in f}
    assert set(priced["forward_ms"]) == seen | {"1x1", "2x2"}  # and plain decoding's steps
    assert set(priced["ratios"]["single:ngram"]) == {"all", "edit", "prose"}
    # each category's forwards priced by its own table, timed right after it ran
    near = priced["forward_ms_near"]
    assert set(near) == {"edit", "prose"}
    for category, table in near.items():
        ran = {
            key for r in rows_by.values() for runs in r["shapes_by_category_runs"][category] for key in runs
        }
        assert set(table) == ran | {"1x1", "2x2"} and all(ms > 0 for ms in table.values())
    assert set(priced["end_table"]["median"]["single:ngram"]) == {"all", "edit", "prose"}
    text = (tmp_path / "out" / "results.md").read_text()
    assert "timed right after that category ran" in text and "Priced at the end-of-run table" in text
    # each request's tokens after its first, per category and repeat, longest first
    lengths = single["lengths_by_category_runs"]
    assert {c: len(v) for c, v in lengths.items()} == {"edit": 2, "prose": 2}
    assert [sum(run) for run in lengths["edit"]] == [t for t, _ in single["by_category_runs"]["edit"]]
    assert all(run == sorted(run, reverse=True) and len(run) == 2 for v in lengths.values() for run in v)
    assert set(priced["matched_ratios"]["single:ngram"]) == {"all", "edit", "prose"}
    # each category's forwards also priced by what every run's forwards of each shape took
    situ = priced["in_situ"]["forward_ms"]
    for category, table in situ.items():
        ran = {
            key for r in rows_by.values() for runs in r["shapes_by_category_runs"][category] for key in runs
        }
        assert set(table) == ran and all(ms > 0 for ms in table.values())
    assert set(priced["in_situ"]["median"]["single:ngram"]) == {"all", "edit", "prose"}
    assert "Priced in situ" in (tmp_path / "out" / "results.md").read_text()
    # the split judge's pairs at the end of each category's run (none where it never split)
    pairs = single["split_pairs_by_category_runs"]
    assert {c: len(v) for c, v in pairs.items()} == {"edit": 2, "prose": 2}
    assert all(isinstance(run, dict) for v in pairs.values() for run in v)
    assert "Priced, outputs matched" in (tmp_path / "out" / "results.md").read_text()


def test_each_repeats_ratio_pairs_a_run_with_plains_run_of_the_same_repeat() -> None:
    plain = {"edit": [[10, 1.0], [10, 2.0]], "prose": [[10, 1.0]]}
    mine = {"edit": [[10, 0.5], [10, 2.5]], "prose": [[10, 1.0], [10, 1.0]], "qa": [[5, 1.0]]}
    # edit: 2.0 in the fast repeat and 0.8 in the slow one; prose ran unequally often, qa not under plain
    assert paired_ratios(mine, plain) == {"edit": [2.0, 0.8]}


def test_with_repeats_the_summary_takes_the_median_of_paired_ratios() -> None:
    def row(name: str, decode: list[float], edit: list[list[float]]) -> dict[str, object]:
        best = max(edit, key=lambda ts: ts[0] / ts[1])
        return {"config": name, "batch": 4, "tokens_per_s": 1.0, "decode_runs": decode,
                "by_category": {"edit": [*best, 0.0]}, "by_category_runs": {"edit": edit},
                "acceptance": {}}  # fmt: skip

    plain = row("plain", [10.0, 20.0, 10.0], [[10, 1.0], [10, 2.0], [10, 1.0]])
    mine = row("+majority", [11.0, 10.0, 12.0], [[10, 0.9], [10, 1.0], [10, 1.1]])
    config = CollectiveBenchConfig(out="x", batch_sizes=(4,), sweep=False)
    summary = summarize([plain, mine], config)
    # paired: 1.111, 2.0, 0.909 (best-of would say 1.0/1.0 = 1.0)
    assert summary["per_category"]["4"]["+majority"] == {"edit": 1.111}
    assert summary["repeats"]["4"]["per_category_ratios"]["+majority"] == {"edit": [1.111, 2.0, 0.909]}
    assert summary["repeats"]["4"]["decode_ratio_median"] == {"+majority": 1.1}
    assert summary["repeats"]["4"]["plain_fastest_over_slowest"] == {"edit": 2.0}


def test_fewer_than_one_prompt_per_category_is_refused() -> None:
    with pytest.raises(ConfigError, match="per_category"):
        CollectiveBenchConfig(out="x", per_category=0)
