"""Prompt lookup (``NgramDrafter``), alone and cut by a ``DraftSizer`` to what pays."""

from __future__ import annotations

import pytest

from coinfer.decoding import AdaptiveDraftLength, DraftSizer, NgramDrafter
from coinfer.errors import ConfigError


def test_ngram_drafter_continues_the_latest_earlier_occurrence() -> None:
    d = NgramDrafter(min_n=1, max_n=3)
    ctx = [1, 2, 3, 4, 9, 1, 2, 3, 5, 7, 1, 2, 3]
    assert d.propose(ctx, 2).tokens == [5, 7]  # latest "1 2 3" continues with 5 7
    assert d.propose(ctx + [5, 7], 3).tokens == [1, 2, 3]  # "5 7" was followed by "1 2 3"
    assert d.propose(ctx + [5, 7, 8], 3).tokens == []  # "8" never occurred before
    assert d.propose([4, 5, 6], 3).tokens == []  # no earlier occurrence
    assert d.propose(ctx, 0).tokens == []
    fresh = NgramDrafter(min_n=1, max_n=3)  # the incremental index equals a rebuilt one
    assert fresh.propose(ctx + [5, 7], 3).tokens == [1, 2, 3]
    with pytest.raises(ConfigError):
        NgramDrafter(min_n=0)


def test_ngram_drafts_say_how_long_the_match_is_and_whether_the_last_proposal_held() -> None:
    d = NgramDrafter(min_n=1, max_n=3)
    copied = list(range(1, 11))  # a 10-token passage, then other text, then the passage again
    ctx = [90, *copied, 50, 51, *copied]
    draft = d.propose(ctx, 2)
    assert draft.tokens == [50, 51]
    assert draft.bucket == (8, False)  # matched over all 10 tokens (grade 8–15), nothing proposed before
    assert d.propose(ctx + [50], 2).bucket == (8, True)  # the previous proposal's first token came
    assert d.propose(ctx + [50, 7], 2).bucket[1] is False  # "51" was proposed, "7" came
    assert NgramDrafter(max_n=3).propose([5, 6, 5], 1).bucket == (1, False)
    with pytest.raises(ConfigError):
        NgramDrafter(max_n=9, horizon=8)


def test_only_a_deep_match_proposes_more_than_shallow_tokens() -> None:
    """A long draft costs many plain forwards on a CPU: only a match of deep_match tokens
    may propose past shallow_tokens."""
    passage = list(range(100, 140))  # 40 tokens, then other text, then the passage again
    d = NgramDrafter(min_n=1, max_n=3, deep_match=8, shallow_tokens=4)
    deep = d.propose([*passage, 7, *passage[:10]], 20)
    assert deep.tokens == passage[10:30] and deep.bucket[0] == 8  # matched 10 tokens back
    shallow = d.propose([*passage, 7, 1, *passage[:3]], 20)
    assert shallow.tokens == passage[3:7]  # a 3-token match: cut at 4
    with pytest.raises(ConfigError):
        NgramDrafter(shallow_tokens=0)


def test_each_request_has_its_own_index() -> None:
    d = NgramDrafter(min_n=1, max_n=3)
    one, two = [1, 2, 3, 9, 1, 2], [1, 2, 5, 1, 2]
    assert [x.tokens for x in d.propose_many([(0, one), (1, two)], 2)] == [[3, 9], [5, 1]]
    d.forget(0)
    assert d.propose_many([(1, [*two, 5])], 1)[0].tokens == [1]  # request 1 kept its index


def _cost(n: int) -> float:
    return 0.07 + 0.02 * (n - 1)  # a CPU-like forward: 70 ms for one token, 20 ms per token more


def _rounds(sizer: DraftSizer | None, context: list[int], next_tokens: list[list[int]]) -> list[list[int]]:
    """Draft 4 tokens (cut by the sizer, if any), let the 'target' produce the given tokens,
    report the cost; repeat, as the collective engine does for a drafter that calls no model."""
    drafter, drafts = NgramDrafter(), []
    for produced in next_tokens:
        if sizer is not None:
            sizer.learn(0, context)
        draft = drafter.propose(context, 4)
        if sizer is not None:
            draft = sizer.cut(0, len(context), draft)
            sizer.observe(drafted=len(draft.tokens), draft_s=0.0, verify_s=_cost(len(draft.tokens) + 1))
        drafts.append(draft.tokens)
        context += produced
    return drafts


def test_shallow_matches_that_never_hold_are_cut_to_nothing() -> None:
    """After each 1 comes a fresh pair: the lookup copies the previous pair and fails."""
    context = [1, 50, 60, 1]
    fresh = [[100 + i, 200 + i, 1] for i in range(60)]
    cut = _rounds(DraftSizer(AdaptiveDraftLength()), list(context), fresh)
    uncut = _rounds(None, list(context), fresh)
    assert all(uncut[10:])  # uncut, every lookup proposes its copy
    assert not any(cut[-20:])  # no verification spent on drafts that never hold


def test_a_deep_copy_keeps_its_full_length() -> None:
    passage = list(range(1000, 1200))
    context = [*passage, *passage[:20]]
    follow = [[passage[20 + 5 * i + j] for j in range(5)] for i in range(30)]  # the copy goes on
    drafts = _rounds(DraftSizer(AdaptiveDraftLength()), context, follow)
    assert [len(d) for d in drafts[-10:]] == [4] * 10
