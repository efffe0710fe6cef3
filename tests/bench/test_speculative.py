"""The speculative benchmark's summary: what a reader of results.json relies on."""

from __future__ import annotations

import pytest

from coinfer.bench.speculative import categories, cell, summarize
from tests.conftest import needs_llama


def _run(speedup: float, identical: bool = True, drafted: int | None = 10, accepted: int | None = 5) -> dict:
    return {"speedup": speedup, "identical": identical, "drafted": drafted, "accepted": accepted}


ROWS = [
    {"id": "h1", "category": "humaneval", "coinfer": _run(2.0), "peer": _run(1.0, drafted=None)},
    {"id": "e1", "category": "edit", "coinfer": _run(4.0, identical=False), "peer": {"error": "boom"}},
    {"id": "g1", "category": "grounded", "coinfer": _run(0.5, drafted=0, accepted=0)},
]


def test_summary_has_geomean_min_categories_identity_and_acceptance() -> None:
    s = summarize(ROWS, "coinfer")
    assert s["geomean_speedup"] == pytest.approx(4.0 ** (1 / 3), abs=1e-3)  # (2 * 4 * 0.5) ** (1/3)
    assert s["min_speedup"] == 0.5
    assert s["per_category"] == {"humaneval": 2.0, "edit": 4.0, "grounded": 0.5}
    assert (s["identical_outputs"], s["total_prompts"], s["failed_prompts"]) == (2, 3, 0)
    assert s["acceptance_rate"] == 0.5  # 10 of 20 drafted tokens


def test_every_category_a_prompt_file_names_is_summarized() -> None:
    rows = [*ROWS, {"id": "s1", "category": "scratch", "coinfer": _run(0.9)},
            {"id": "f1", "category": "followup", "coinfer": _run(1.6)}]  # fmt: skip
    s = summarize(rows, "coinfer")
    assert s["per_category"] == {
        "humaneval": 2.0,
        "edit": 4.0,
        "grounded": 0.5,
        "scratch": 0.9,
        "followup": 1.6,
    }
    assert categories(rows) == ["humaneval", "edit", "grounded", "scratch", "followup"]


def test_a_peer_that_failed_or_did_not_run_is_left_out_and_counted() -> None:
    s = summarize(ROWS, "peer")
    assert (s["total_prompts"], s["failed_prompts"], s["geomean_speedup"]) == (1, 1, 1.0)
    assert s["acceptance_rate"] is None  # the peer does not report its drafts
    assert [cell(r.get("peer")) for r in ROWS] == ["1.00x", "failed", "–"]
    assert cell(ROWS[1]["coinfer"]) == "4.00x ≠"


@needs_llama
def test_a_peer_that_raises_is_recorded_and_the_run_goes_on(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    from coinfer.bench.peers import Peer
    from coinfer.bench.speculative import SpecBenchConfig, measure_prompt

    def broken(prompt: list[int], max_tokens: int):  # type: ignore[no-untyped-def]
        raise ValueError("could not broadcast")

    item = {"id": "x", "category": "edit", "messages": [{"role": "user", "content": "Say hi."}]}
    logged: list[str] = []
    config = SpecBenchConfig(out="unused", target="smollm2-135m", max_tokens=4)
    row = measure_prompt(item, smollm_llama, {"broken": Peer(broken)}, config, logged.append)
    assert row["broken"] == {"error": "ValueError: could not broadcast"}
    assert row["coinfer"]["speedup"] > 0
    assert any("broken failed" in line for line in logged) and "broken failed" in logged[-2]


@needs_llama
def test_repeats_keep_the_fastest_run_and_flag_a_text_that_changes(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    from coinfer.bench.peers import Peer, Run
    from coinfer.bench.speculative import SpecBenchConfig, measure_prompt

    calls: list[str] = []

    def flaky(prompt: list[int], max_tokens: int) -> Run:
        calls.append("flaky")
        return Run([1, 2] if len(calls) == 1 else [1, 3], 10.0 * len(calls), 5.0)

    item = {"id": "x", "category": "edit", "messages": [{"role": "user", "content": "Say hi."}]}
    config = SpecBenchConfig(out="unused", target="smollm2-135m", max_tokens=6, repeats=3)
    row = measure_prompt(item, smollm_llama, {"flaky": Peer(flaky)}, config, lambda line: None)
    assert len(calls) == 3
    assert row["flaky"]["decode_tps"] == 30.0  # the fastest of three
    assert row["flaky"]["identical"] is False  # its text changed between runs
    timings = row["coinfer"]["timings"]  # where coinfer's rounds spent their time
    assert timings["rounds"] >= 1 and timings["forward"] > 0
    assert {"draft", "logits", "accept", "policy", "detok", "other"} <= set(timings)


def test_the_time_table_splits_coinfers_rounds_and_gives_llama_servers_ms_per_token() -> None:
    from coinfer.bench.speculative import time_table

    ours = {"draft": 0.1, "forward": 30.0, "logits": 0.2, "accept": 0.1, "policy": 0.1, "detok": 0.0}
    ours |= {"other": 0.5, "rounds": 10}
    rows = [{"id": "a", "category": "edit", "tokens": 20, "coinfer": {"timings": ours},
             "srv": {"timings": {"predicted_n": 20, "predicted_ms": 500.0}}}]  # fmt: skip
    coinfer_line, server_line = time_table(rows, ["coinfer", "srv"])[3:]
    assert coinfer_line.startswith("| coinfer | 10 | 2.00 | 31.0 | 0.10 | 30.00 |")
    assert coinfer_line.endswith("| 15.5 |")  # 31 ms per round, two tokens a round
    assert server_line.endswith("| 25.0 |")


@needs_llama
def test_a_peer_that_remembers_earlier_requests_runs_once_whatever_the_repeats(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    from coinfer.bench.peers import Peer, Run
    from coinfer.bench.speculative import SpecBenchConfig, measure_prompt

    calls: list[int] = []

    def pooled(prompt: list[int], max_tokens: int) -> Run:
        calls.append(1)
        return Run([1], 10.0 * len(calls), 5.0)

    item = {"id": "x", "category": "edit", "messages": [{"role": "user", "content": "Say hi."}]}
    config = SpecBenchConfig(out="unused", target="smollm2-135m", max_tokens=4, repeats=3)
    row = measure_prompt(
        item, smollm_llama, {"pool": Peer(pooled, remembers=True)}, config, lambda line: None
    )
    assert len(calls) == 1 and row["pool"]["decode_tps"] == 10.0


def test_the_profile_names_the_python_overhead_per_round_and_the_costliest_functions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import cProfile

    from coinfer.bench.speculative import write_profile

    profiler = cProfile.Profile()
    profiler.enable()
    sorted(range(1000), key=lambda x: -x)
    profiler.disable()
    timings = {"draft": 0.1, "forward": 30.0, "logits": 0.2, "accept": 0.1, "policy": 0.2, "detok": 0.1}
    rows = [{"coinfer": {"timings": timings | {"other": 0.5, "rounds": 4}}}]
    write_profile(tmp_path / "profile.txt", profiler, rows)
    text = (tmp_path / "profile.txt").read_text()
    assert text.startswith("Python overhead per round, under cProfile: 1.000 ms over 4 rounds")
    assert "<lambda>" in text  # pstats' table of the functions that took the most time
