"""Collective speculative decoding (paper 001): several drafts vote, the draft length
adapts online, drafting and verifying run as a pipeline over many requests.

So far: the majority-voted speculator's vote and weights (``voting``) and the adaptive
speculation length selector (``selector``).
"""

from coinfer.engines.collective.selector import LengthSelectorConfig, SpeculationLengthSelector
from coinfer.engines.collective.voting import Vote, VoteConfig, VoteWeights, majority_vote

__all__ = [
    "LengthSelectorConfig",
    "SpeculationLengthSelector",
    "Vote",
    "VoteConfig",
    "VoteWeights",
    "majority_vote",
]
