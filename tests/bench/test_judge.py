"""The pairwise judge: the verdict it reads, the position swap, the summary, and a real
judge (SmolLM2 on llama.cpp) giving a verdict in both of its ways."""

from __future__ import annotations

import pytest

from coinfer.bench import judge as judge_module
from coinfer.bench.judge import (
    PAIR_SYSTEM,
    PAIR_TEMPLATE,
    Verdict,
    judge_once,
    judge_pair,
    read_verdict,
    summarize_pairs,
)


def test_the_verdict_is_the_last_double_bracketed_letter() -> None:
    assert read_verdict("A is vague. [[B]]") == "B"
    assert read_verdict("Not [[A]] but rather... final: [[C]]") == "C"
    assert read_verdict("A is better [A]") is None
    assert read_verdict("") is None


def test_the_prompt_is_mt_benchs_pair_prompt() -> None:
    assert PAIR_SYSTEM.startswith("Please act as an impartial judge")
    assert '"[[C]]" for a tie' in PAIR_SYSTEM
    text = PAIR_TEMPLATE.format(question="Q?", answer_a="one", answer_b="two")
    assert (
        text.index("Q?") < text.index("Assistant A's Answer]\none") < text.index("Assistant B's Answer]\ntwo")
    )


@pytest.mark.parametrize(
    ("in_order", "swapped", "outcome"),
    [
        ("A", "B", "first"),  # first wins in both places
        ("B", "A", "second"),
        ("C", "C", "tie"),
        ("A", "A", "inconsistent"),  # the judge prefers whatever comes first
        ("A", "C", "inconsistent"),
    ],
)
def test_a_pair_counts_only_when_both_orders_agree(
    monkeypatch: pytest.MonkeyPatch, in_order: str, swapped: str, outcome: str
) -> None:
    seen: list[tuple[str, str]] = []

    def once(judge: object, question: str, a: str, b: str) -> Verdict:
        seen.append((a, b))
        return Verdict(in_order if a == "mine" else swapped, False, "")  # type: ignore[arg-type]

    monkeypatch.setattr(judge_module, "judge_once", once)
    j = judge_pair(object(), "Q?", "mine", "theirs")
    assert j.outcome == outcome
    assert seen == [("mine", "theirs"), ("theirs", "mine")]


def test_the_summary_counts_no_worse_with_and_without_inconsistent_pairs() -> None:
    s = summarize_pairs(["first", "tie", "second", "inconsistent"], first="outline", second="naive")
    assert (s["outline_wins"], s["ties"], s["naive_wins"], s["inconsistent"]) == (1, 1, 1, 1)
    assert s["no_worse"] == 0.75 and s["no_worse_strict"] == 0.5 and s["order_agreement"] == 0.75
    assert summarize_pairs([], first="a", second="b")["no_worse"] is None


def test_a_real_judge_gives_a_verdict_and_is_asked_for_one_when_it_runs_out(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    question = "Name two primary colours."
    good, bad = "Red and blue.", "Bananas are yellow."
    forced = judge_once(smollm_llama, question, good, bad, max_tokens=1)
    assert forced.forced and forced.winner in ("A", "B", "C")
    free = judge_once(smollm_llama, question, good, bad, max_tokens=96)
    assert free.winner in ("A", "B", "C") and free.text
    assert free.forced == (read_verdict(free.text) is None)


def test_the_bench_judges_outline_against_naive_and_skips_identical_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coinfer.bench import jupiter_decode
    from coinfer.bench.judge import PairJudgment
    from coinfer.models import load

    class Judge:
        closed = False

        def close(self) -> None:
            Judge.closed = True

    asked: list[tuple[str, str]] = []

    def pair(judge: object, question: str, first: str, second: str) -> PairJudgment:
        asked.append((first, second))
        v = Verdict("A", False, "why")
        return PairJudgment("first", v, Verdict("B", False, "why"))

    monkeypatch.setattr(load, "load_model", lambda spec, **kw: Judge())
    monkeypatch.setattr(judge_module, "judge_pair", pair)
    rows = [
        {"half": "tuned", "question": "Q1", "naive": {"text": "same"}, "op": {"text": "same"}},
        {"half": "held_out", "question": "Q2", "naive": {"text": "plain"}, "op": {"text": "1. **a**: x"}},
        {"half": "humaneval", "question": "Q3", "naive": {"text": "def f"}, "op": {"text": "def g"}},
    ]
    summary = jupiter_decode.judge_answers(rows, "some-judge", log=lambda line: None)
    assert asked == [("1. **a**: x", "plain")] and Judge.closed  # code (the router fell back): not judged
    assert "judge" not in rows[2]
    assert rows[0]["judge"] == {"outcome": "tie", "identical": True}
    assert rows[1]["judge"]["outcome"] == "first" and rows[1]["judge"]["verdicts"] == ["A", "B"]
    assert summary["all"]["outline_wins"] == 1 and summary["all"]["ties"] == 1
    assert summary["held_out"]["pairs"] == 1 and summary["forced_verdicts"] == 0
