"""The majority-voted speculator (paper 001, §3.2): several drafts, one weighted vote.

Every speculative model (SSM) drafts a continuation of the same context. The drafts are
merged into a token tree whose node weight is the sum of the weights of the drafts that
pass through it; from the root, the heaviest child is taken level by level down to a
leaf (``majority_vote``). The path ends where one draft ends, so the output is one SSM's
draft: that SSM is the *voted SSM* of the round.

After verification each SSM's *average acceptance rate* (ACR, Eq. 1: the mean of the
acceptance rates of its outputs since the last update) is compared with two thresholds:
above ``reward_threshold`` its weight is multiplied by ``reward_factor``, below
``punish_threshold`` by ``punish_factor`` (the weighted-majority algorithm).

The paper scores only the voted SSM's output, so an SSM that loses the vote never
changes weight. Here, by default (``score="all"``), every draft is also scored against
the tokens the target went on to produce, which are known for free: a draft's acceptance
rate is the length of its prefix that the target produced, over its length. A losing
SSM that would have done better thus gains weight; ``score="voted"`` is the paper's rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from coinfer.errors import ConfigError
from coinfer.models.tree import TokenTree

__all__ = ["Vote", "VoteConfig", "VoteWeights", "held_prefix", "majority_vote"]


@dataclass(frozen=True)
class VoteConfig:
    """Thresholds and factors of the weight updates (the paper leaves their values open)."""

    reward_threshold: float = 0.6
    punish_threshold: float = 0.3
    reward_factor: float = 1.25
    punish_factor: float = 0.8
    min_weight: float = 0.01
    max_weight: float = 100.0
    score: Literal["all", "voted"] = "all"

    def __post_init__(self) -> None:
        if not 0.0 <= self.punish_threshold <= self.reward_threshold <= 1.0:
            raise ConfigError("need 0 <= punish_threshold <= reward_threshold <= 1")
        if not (self.reward_factor >= 1.0 and 0.0 < self.punish_factor <= 1.0):
            raise ConfigError("need reward_factor >= 1 and 0 < punish_factor <= 1")
        if not 0.0 < self.min_weight <= self.max_weight:
            raise ConfigError("need 0 < min_weight <= max_weight")
        if self.score not in ("all", "voted"):
            raise ConfigError(f"score must be 'all' or 'voted', got {self.score!r}")


@dataclass(frozen=True)
class Vote:
    """The majority-approved draft and the SSM it came from (-1: every draft was empty)."""

    tokens: list[int]
    voter: int


def majority_vote(drafts: Sequence[Sequence[int]], weights: Sequence[float]) -> Vote:
    """The heaviest root-to-leaf path of the drafts' weighted token tree.

    The drafts are merged into one ``TokenTree``; a node weighs the summed weights of the
    drafts through it. From the roots, the heaviest child is taken level by level; a tie
    goes to the child whose heaviest single draft is heavier, then to the earlier draft.
    The walk ends at a leaf, where the drafts through it end: the heaviest of them is the
    voted draft.
    """
    if len(drafts) != len(weights):
        raise ConfigError(f"{len(drafts)} drafts but {len(weights)} weights")
    tree = TokenTree.from_paths(drafts)
    through: list[list[int]] = [[] for _ in range(len(tree))]  # node -> the drafts through it
    for i, draft in enumerate(drafts):
        for node in tree.nodes_along(draft):
            through[node].append(i)
    children, end = tree.children(), -1
    level = [n for n, p in enumerate(tree.parents) if p < 0]
    while level:
        end = max(
            level,
            key=lambda n: (
                sum(weights[i] for i in through[n]),
                max(weights[i] for i in through[n]),
                -min(through[n]),
            ),
        )
        level = children[end]
    if end < 0:
        return Vote([], -1)
    voter = max(through[end], key=lambda i: (weights[i], -i))
    return Vote([int(t) for t in drafts[voter]], voter)


def held_prefix(draft: Sequence[int], produced: Sequence[int]) -> int:
    """How many of the draft's first tokens equal what the target produced there."""
    held = 0
    while held < min(len(draft), len(produced)) and draft[held] == produced[held]:
        held += 1
    return held


class VoteWeights:
    """The SSMs' weights and the acceptance rates gathered since the last update."""

    def __init__(self, count: int, config: VoteConfig = VoteConfig(), initial: Sequence[float] | None = None):  # noqa: B008
        if count < 1:
            raise ConfigError("collective speculation needs at least one draft")
        self.config = config
        self.weights = [1.0] * count if initial is None else [float(w) for w in initial]
        if len(self.weights) != count or min(self.weights) <= 0:
            raise ConfigError(f"need {count} positive initial weights")
        self._rates: list[list[float]] = [[] for _ in range(count)]

    def record(self, drafts: Sequence[Sequence[int]], voter: int, produced: Sequence[int]) -> None:
        """Score a round's drafts against the tokens the target produced after the context
        they were drafted from (the voted one's kept prefix, then its correction)."""
        for i, draft in enumerate(drafts):
            if not draft or (self.config.score == "voted" and i != voter):
                continue
            self._rates[i].append(held_prefix(draft, produced) / len(draft))

    def acceptance_rates(self) -> list[float | None]:
        """Eq. 1 per SSM over the outputs recorded since the last update (None: none)."""
        return [sum(r) / len(r) if r else None for r in self._rates]

    def update(self) -> list[float]:
        """Reward or punish each SSM by its ACR; start a new window; the new weights."""
        c = self.config
        for i, acr in enumerate(self.acceptance_rates()):
            if acr is None:
                continue
            if acr > c.reward_threshold:
                self.weights[i] = min(c.max_weight, self.weights[i] * c.reward_factor)
            elif acr < c.punish_threshold:
                self.weights[i] = max(c.min_weight, self.weights[i] * c.punish_factor)
        self._rates = [[] for _ in self._rates]
        return list(self.weights)
