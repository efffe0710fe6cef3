"""The n-gram source cuts each draft to what its match depth has earned (no model)."""

from __future__ import annotations

from coinfer.engines.collective.sources import NgramSource


def _cost(n: int) -> float:
    return 0.07 + 0.02 * (n - 1)  # a CPU-like forward: 70 ms for one token, 20 ms per token more


def _rounds(source: NgramSource, context: list[int], next_tokens: list[list[int]]) -> list[list[int]]:
    """Draft 4 tokens, let the 'target' produce the given tokens, report the cost; repeat."""
    drafts = []
    for produced in next_tokens:
        draft = source.propose_many([(0, context)], 4)[0]
        source.observe(len(draft), _cost(len(draft) + 1))
        drafts.append(draft)
        context += produced
    return drafts


def test_shallow_matches_that_never_hold_are_cut_to_nothing() -> None:
    """After each 1 comes a fresh pair: the lookup copies the previous pair and fails."""
    context = [1, 50, 60, 1]
    fresh = [[100 + i, 200 + i, 1] for i in range(60)]
    cut = _rounds(NgramSource(), list(context), fresh)
    uncut = _rounds(NgramSource(adaptive=False), list(context), fresh)
    assert all(uncut[10:])  # uncut, every lookup proposes its copy
    assert not any(cut[-20:])  # no verification spent on drafts that never hold


def test_a_deep_copy_keeps_its_full_length() -> None:
    passage = list(range(1000, 1200))
    context = [*passage, *passage[:20]]
    follow = [[passage[20 + 5 * i + j] for j in range(5)] for i in range(30)]  # the copy goes on
    drafts = _rounds(NgramSource(), context, follow)
    assert [len(d) for d in drafts[-10:]] == [4] * 10
