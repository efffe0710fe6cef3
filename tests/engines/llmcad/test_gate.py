"""The gate between LLMCad's tree rounds and plain speculation with prompt lookup."""

from __future__ import annotations

from coinfer.engines.llmcad.gate import ModeGate


def test_each_mode_runs_once_the_cheap_one_first_then_the_faster_keeps_the_rounds() -> None:
    gate = ModeGate(first_retry=4)
    gate.observe_costs(draft_forward_s=0.01, target_forward_s=1.0)  # a target read from storage
    assert gate.choose() == "ngram"
    gate.observe("ngram", tokens=2, seconds=0.1)  # 20 tok/s
    assert gate.choose() == "tree" and gate.exploring("tree")  # measured small first
    gate.observe("tree", tokens=3, seconds=1.0)  # 3 tok/s
    assert gate.choose() == "ngram" and not gate.exploring("ngram")
    assert gate.exploring("tree")


def test_the_slower_mode_is_retried_after_a_wait_that_doubles_while_it_loses() -> None:
    gate = ModeGate(first_retry=2)
    gate.observe_costs(draft_forward_s=0.01, target_forward_s=1.0)
    gate.observe("ngram", 2, 0.1)
    gate.observe("tree", 1, 1.0)
    retried = []
    for i in range(40):
        mode = gate.choose()
        if mode == "tree":
            retried.append(i)
        gate.observe(mode, 1 if mode == "tree" else 2, 1.0 if mode == "tree" else 0.1)
    gaps = [b - a for a, b in zip(retried, retried[1:], strict=False)]
    assert len(retried) >= 3 and gaps == sorted(gaps) and gaps[-1] > gaps[0]


def test_a_retry_that_now_wins_takes_the_rounds_back() -> None:
    gate = ModeGate(first_retry=1)
    gate.observe_costs(draft_forward_s=0.01, target_forward_s=1.0)
    gate.observe("ngram", 5, 1.0)
    gate.observe("tree", 1, 1.0)
    gate.observe("ngram", 5, 1.0)
    assert gate.choose() == "tree"
    gate.observe("tree", 50, 1.0)  # a target that became dear: trees pay now
    assert gate.best() == "tree"
    chosen = []
    for _ in range(20):
        mode = gate.choose()
        chosen.append(mode)
        gate.observe(mode, 50 if mode == "tree" else 5, 1.0)
    assert chosen.count("tree") >= 15


def test_trees_are_not_tried_while_a_draft_forward_is_dear_beside_a_target_forward() -> None:
    """A 0.5B draft beside a 1.5B target in memory: a third of its cost. Trying a tree would
    cost the draft's prefill of the prompt; it is never tried."""
    gate = ModeGate(first_retry=1)
    assert gate.choose() == "ngram"  # nothing measured yet
    gate.observe_costs(draft_forward_s=0.025, target_forward_s=0.3)  # a long first chain
    gate.observe_costs(target_forward_s=0.07)  # the cheapest forward seen counts
    assert not gate.trees_may_pay()
    for _ in range(50):
        assert gate.choose() == "ngram"
        gate.observe("ngram", 2, 0.07)
