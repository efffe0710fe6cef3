"""Collective speculative decoding (paper 001): several drafts vote, the draft length
adapts online, drafting and verifying run as a pipeline over many requests.

``voting``: the weighted vote over drafts and the weights' rewards and punishments;
``selector``: the speculation length chosen online; ``sources``: drafts for many requests;
``gate``: which sources draft, by whether they pay for themselves;
``rounds``: one round's steps; ``engine``: the scheduler and ``collective_generate``;
``pipeline``: drafting overlapped with verifying.
"""

from coinfer.engines.collective.engine import CollectiveConfig, collective_generate
from coinfer.engines.collective.selector import LengthSelectorConfig, SpeculationLengthSelector
from coinfer.engines.collective.voting import Vote, VoteConfig, VoteWeights, majority_vote

__all__ = [
    "CollectiveConfig",
    "LengthSelectorConfig",
    "SpeculationLengthSelector",
    "Vote",
    "VoteConfig",
    "VoteWeights",
    "collective_generate",
    "majority_vote",
]
