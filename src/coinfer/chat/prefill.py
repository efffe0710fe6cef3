"""How one step's prompt budget is shared among the prompts being read (chunked prefill).

The prompts being read share the step's ``chunk`` tokens shortest rest first, ties oldest
first, so a short prompt behind a long one starts within a step (as vLLM's concurrent
partial prefills let it). Until the oldest prompt's turn the others leave it half the
budget, so that a long prompt always advances and none waits forever.

Both the step that reads (``LocalChat._prompt_chunks``) and the admission that decides
whether a waiting job would read in it (``admission.reads_this_step``) plan with
``share_step``, so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["share_step"]


def share_step(rests: Sequence[int], chunk: int, cut: Callable[[int, int], int]) -> list[tuple[int, int]]:
    """The step's reading plan: ``(i, take)`` for each prompt ``i`` of ``rests`` (each
    one's tokens left to read, the oldest first) that reads now, in the order read.
    ``cut(i, budget)`` says how many of prompt ``i``'s next tokens to read within
    ``budget`` (0: none this step); the oldest, given a budget too small to cut, reads
    as much as it allows, uncut."""
    if not rests:
        return []
    reserve = min(rests[0], chunk // 2)
    budget = chunk
    plan: list[tuple[int, int]] = []
    for i in sorted(range(len(rests)), key=lambda k: rests[k]):  # stable: ties oldest first
        if i == 0:
            take = cut(i, budget) or max(1, min(budget, rests[i]))
            reserve = 0
        else:
            take = cut(i, max(0, budget - reserve))
        if take:
            plan.append((i, take))
            budget -= take
    return plan
