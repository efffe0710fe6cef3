"""Whether the resident model drafts at all: LLMCad's trees, or n-gram lookup alone.

LLMCad pays when a target forward is dear (its weights come from storage: seconds a
verification) and the draft's forwards are cheap beside it. With a target that fits in
memory on a CPU, a 0.5B draft's forward costs a third of a 1.5B target's, and drafting
with it loses to plain speculation with prompt lookup (``--draft auto``). So with no
memory budget the engine measures both: each round is a *tree* round or an *n-gram*
round (the speculative engine's, with its cost-aware draft length), and the gate keeps
the mode with the higher rate of tokens per second. A tree is not even tried while one
draft forward costs more than ``TREE_COST_RATIO`` of a target forward (measured: the
draft's once, the target's in every round): trying it costs the draft's prefill of the
whole prompt, which on a CPU-bound pair is seconds. The losing mode is retried after
4, 8, 16, ... rounds (twice as long each time it loses again), and a tree retried while
losing (or not yet measured) is kept small (``EXPLORING_TREE_SIZE`` in the engine), so
that measuring it costs little.
"""

from __future__ import annotations

__all__ = ["ModeGate"]

MODES = ("ngram", "tree")  # the cheap mode is measured first
TREE_COST_RATIO = 0.1  # trees are tried only where a draft forward costs at most this share of a target's


class ModeGate:
    """Chooses each round's mode from measured tokens per second."""

    def __init__(self, *, first_retry: int = 4, longest_wait: int = 128, smoothing: float = 0.3) -> None:
        self.rate: dict[str, float | None] = dict.fromkeys(MODES)
        self.wait = dict.fromkeys(MODES, first_retry)
        self.idle = dict.fromkeys(MODES, 0)  # rounds since the mode last ran
        self.longest_wait, self.smoothing = longest_wait, smoothing
        self.draft_forward_s: float | None = None
        self.target_forward_s: float | None = None

    def observe_costs(
        self, *, draft_forward_s: float | None = None, target_forward_s: float | None = None
    ) -> None:
        """What one forward of the draft, or of the target (the cheapest seen: on a CPU a
        forward over many drafted tokens costs more than over one), was measured to cost."""
        if draft_forward_s is not None:
            self.draft_forward_s = draft_forward_s
        if target_forward_s is not None:
            old = self.target_forward_s
            self.target_forward_s = target_forward_s if old is None else min(old, target_forward_s)

    def trees_may_pay(self) -> bool:
        """Whether a draft forward is cheap enough beside a target forward to try trees."""
        if self.draft_forward_s is None or self.target_forward_s is None:
            return False
        return self.draft_forward_s <= TREE_COST_RATIO * self.target_forward_s

    def best(self) -> str:
        known = {m: r for m, r in self.rate.items() if r is not None}
        return max(known, key=lambda m: known[m]) if known else MODES[0]

    def choose(self) -> str:
        """The mode of the next round: each once first, then the faster, and the slower
        when its wait is over."""
        if self.rate["tree"] is None and not self.trees_may_pay():
            return "ngram"
        for mode in MODES:
            if self.rate[mode] is None:
                return mode
        best = self.best()
        other = next(m for m in MODES if m != best)
        return other if self.idle[other] >= self.wait[other] else best

    def exploring(self, mode: str) -> bool:
        """Whether ``mode`` runs now only to be measured (it is not known to be the faster)."""
        return self.rate[mode] is None or mode != self.best()

    def observe(self, mode: str, tokens: int, seconds: float) -> None:
        """A round of ``mode`` produced ``tokens`` in ``seconds``."""
        rate = tokens / max(seconds, 1e-9)
        old = self.rate[mode]
        self.rate[mode] = rate if old is None else old + self.smoothing * (rate - old)
        for m in MODES:
            self.idle[m] += 1
        self.idle[mode] = 0
        if self.best() != mode and old is not None:
            self.wait[mode] = min(self.wait[mode] * 2, self.longest_wait)
