"""Collective speculative decoding (paper 001): several drafts vote, the draft length
adapts online, drafting and verifying run as a pipeline over many requests.

``config``: the knobs; ``voting``: the weighted vote over drafts and the weights' rewards
and punishments; ``selector``: the speculation length chosen online; ``gate``: which
drafters draft, by whether they pay for themselves; ``rounds``: one round's steps;
``engine``: the scheduler, ``stream`` and ``generate``; ``pipeline``: drafting
overlapped with verifying. The drafters themselves are ``coinfer.decoding``'s.
"""

from coinfer.engines.collective.config import CollectiveConfig
from coinfer.engines.collective.engine import generate, stream
from coinfer.engines.collective.gate import GateConfig
from coinfer.engines.collective.selector import LengthSelectorConfig, SpeculationLengthSelector
from coinfer.engines.collective.voting import Vote, VoteConfig, VoteWeights, majority_vote

__all__ = [
    "CollectiveConfig",
    "GateConfig",
    "LengthSelectorConfig",
    "SpeculationLengthSelector",
    "Vote",
    "VoteConfig",
    "VoteWeights",
    "generate",
    "majority_vote",
    "stream",
]
