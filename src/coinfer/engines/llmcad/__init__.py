"""LLMCad (paper 002): a memory-resident draft writes a token tree, a target larger than
the memory budget verifies it in one pass when the draft's confidence runs low.

``config``: the knobs; ``pacer``: which branch grows next (Eq. 1-2); ``tree_draft``: the
tree and its branches' draft sequences; ``fallback``: when to verify (T_c < alpha, Eq. 3);
``speculation``: the draft writing on during verification (§3.4); ``engine``: the rounds,
``stream`` and ``generate``.
"""

from coinfer.engines.llmcad.config import LLMCadConfig
from coinfer.engines.llmcad.engine import TreeRound, generate, generate_rounds, stream
from coinfer.engines.llmcad.fallback import AdaptiveThreshold, next_alpha, tree_confidence
from coinfer.engines.llmcad.pacer import fair_share_gaps, pick_branch

__all__ = [
    "AdaptiveThreshold",
    "LLMCadConfig",
    "TreeRound",
    "fair_share_gaps",
    "generate",
    "generate_rounds",
    "next_alpha",
    "pick_branch",
    "stream",
    "tree_confidence",
]
