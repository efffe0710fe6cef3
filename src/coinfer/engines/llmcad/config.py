"""LLMCad's knobs (paper 002), validated when made."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from coinfer.decoding.sampling import SamplingParams
from coinfer.decoding.speculative import check_budget, check_draft_tokens
from coinfer.errors import ConfigError

__all__ = ["LLMCadConfig"]


@dataclass(frozen=True, kw_only=True)
class LLMCadConfig:
    """``draft_tokens``: ``"auto"`` verifies when the tree-cumulative confidence falls
    below the self-adaptive threshold (§3.3), a whole number k verifies every tree of k
    tokens (0: the target alone);
    ``alpha``: the threshold's first value (the paper's default, 0.01);
    ``branch_confidence``: a candidate token the draft gives at least this probability
    starts a branch of its own (§3.2);
    ``max_tree_size``: the tree is verified when it holds this many tokens, whatever its
    confidence; ``max_branches``: how many branches grow at once;
    ``speculative``: the draft keeps growing the most likely branch while the target
    verifies (§3.4);
    ``gate``: with no memory budget, measure tree rounds against plain speculation with
    prompt lookup and keep the faster (False: tree rounds only);
    ``memory_budget``: bytes the process may hold; the target (memory-mapped) has its
    weights read ahead within what the budget leaves, while the draft computes (§3.4's
    compute-IO pipeline). None: no budget, no reading ahead;
    ``max_batch``: how many requests a session (a server's) answers at once, each on its
    own thread, both models' forwards of every request in flight merged into one batch
    (one at a time under a memory budget, whose reading ahead follows one forward).
    """

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_tokens: int | Literal["auto"] = "auto"
    alpha: float = 0.01
    branch_confidence: float = 0.15
    max_tree_size: int = 48
    max_branches: int = 4
    speculative: bool = True
    gate: bool = True
    memory_budget: int | None = None
    max_batch: int = 1

    def __post_init__(self) -> None:
        check_budget(self.max_tokens)
        check_draft_tokens(self.draft_tokens)
        for name in ("alpha", "branch_confidence"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0 < value <= 1):
                raise ConfigError(f"{name} must be a probability in (0, 1], got {value!r}")
        if self.memory_budget is not None and (
            not isinstance(self.memory_budget, int) or self.memory_budget <= 0
        ):
            raise ConfigError(f"memory_budget must be a positive byte count, got {self.memory_budget!r}")
        for name in ("max_tree_size", "max_branches", "max_batch"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, got {value!r}")
