"""The collective engine's knobs (paper 001), validated when made."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from coinfer.decoding.sampling import SamplingParams
from coinfer.decoding.speculative import check_budget, check_draft_tokens
from coinfer.engines.collective.gate import GateConfig
from coinfer.engines.collective.selector import LengthSelectorConfig
from coinfer.engines.collective.voting import VoteConfig
from coinfer.errors import ConfigError

__all__ = ["CollectiveConfig"]


@dataclass(frozen=True, kw_only=True)
class CollectiveConfig:
    """``draft_tokens``: a fixed speculation length s, or ``"auto"`` for the selector's
    online choice (``selector`` holds its knobs, §3.3);
    ``vote``: the weights' rewards and punishments (§3.2);
    ``gate``: draft only with the drafts that pay for themselves (``gate``), or None for
    every draft every round (classic speculative decoding);
    ``cut_cheap_drafts``: cut each draft of a drafter that calls no model (n-gram lookup)
    to the length its kind of draft has earned;
    ``max_batch``: requests decoded together;
    ``batch_floor``: in a batch, the cheap drafts' tokens are cut together so that every
    request still expects at least this share of its plain-decoding rate (0: whatever
    gives the batch the most tokens per second, which on a compute-bound CPU slowed the
    requests with nothing to copy to 0.42-0.85x of their plain rate);
    ``pipeline``: draft on another thread while the target verifies (§3.4), with
    ``draft_threads`` CPU threads (and cores) for the drafts and the rest for the target.
    """

    max_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft_tokens: int | Literal["auto"] = "auto"
    selector: LengthSelectorConfig = field(default_factory=LengthSelectorConfig)
    vote: VoteConfig = field(default_factory=VoteConfig)
    gate: GateConfig | None = field(default_factory=GateConfig)
    cut_cheap_drafts: bool = True
    max_batch: int = 8
    batch_floor: float = 0.97
    pipeline: bool = False
    draft_threads: int = 1

    def __post_init__(self) -> None:
        check_budget(self.max_tokens)
        check_draft_tokens(self.draft_tokens)
        if not 0.0 <= self.batch_floor <= 1.0:
            raise ConfigError(
                f"batch_floor must be within 0 and 1, got {self.batch_floor}",
                hint="--batch-floor 0.97 keeps every request at 97% of its plain rate; 0: the batch's best",
            )
        if self.max_batch < 1 or self.draft_threads < 1:
            raise ConfigError(
                f"max_batch and draft_threads must be at least 1, got {self.max_batch}, {self.draft_threads}"
            )
