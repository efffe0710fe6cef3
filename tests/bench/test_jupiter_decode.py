"""The jupiter-decode bench's parts that need no devices: its questions, the router's rates
on them and on HumanEval, and the summary of rows."""

from __future__ import annotations

from coinfer.bench.jupiter_decode import list_questions, router_rates, summarize


def test_the_questions_have_a_tuned_and_a_held_out_half_that_do_not_overlap() -> None:
    q = list_questions()
    assert len(q["held_out"]) >= 10 and q["tuned"]
    assert not set(q["tuned"]) & set(q["held_out"])


def test_the_router_meets_the_issues_rates_on_the_suite() -> None:
    rates = router_rates()
    assert rates["held_out"]["rate"] >= 0.7 and rates["tuned"]["rate"] >= 0.7
    assert rates["humaneval"]["of"] == 164 and 1 - rates["humaneval"]["rate"] >= 0.9
    assert 1 - rates["humaneval_chat"]["rate"] >= 0.9


def test_the_summary_is_the_median_ratio_to_naive_per_half() -> None:
    def run(tok_s: float, points: int = 0) -> dict[str, float]:
        return {"tok_s": tok_s, "ms_per_token": 1000 / tok_s, "mean_accepted_length": 1.0, "points": points}

    rows = [
        {"half": "tuned", "naive": run(2.0), "op": run(5.0, 4)},
        {"half": "held_out", "naive": run(2.0), "op": run(3.0, 3)},
        {"half": "held_out", "naive": run(4.0), "op": run(4.0, 0)},
        {"half": "humaneval", "naive": run(4.0), "op": run(3.0, 0)},
    ]
    s = summarize(rows, ["naive", "op"])
    assert s["tuned"]["op"]["speedup_vs_naive"] == 2.5
    assert s["held_out"]["op"]["speedup_vs_naive"] == 1.25 and s["held_out"]["op"]["outline_taken"] == 1
    assert s["all"]["questions"] == 3 and s["all"]["naive"]["speedup_vs_naive"] == 1.0
    assert s["humaneval"]["questions"] == 1 and s["humaneval"]["op"]["speedup_vs_naive"] == 0.75
