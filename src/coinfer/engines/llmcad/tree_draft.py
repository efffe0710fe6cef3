"""Token tree generation by the memory-resident model (§3.2).

The tree hangs off the context: its roots are candidates for the token after the
pending one (the last the target chose). Each *branch* is a root-to-tip path with its own
draft sequence, forked where it split off, so lengthening any branch is one ordinary
one-token forward of the draft (the paper's tree decoder: no context switch, each token
sees only its own ancestors). Expanding a branch's tip reads the draft's distribution
after it: the most likely token lengthens the branch, and every other candidate with at
least ``branch_confidence`` of the mass starts a branch of its own (until
``max_branches``). The pacer (``pacer.pick_branch``) chooses the branch to expand.

After verification ``settle`` keeps the branch that holds the accepted path (its cache is
the new context's) and releases the others.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from coinfer.decoding.drafters import rewind_to
from coinfer.decoding.learned import Learned
from coinfer.decoding.sampling import SamplingParams, probs_from_logits
from coinfer.engines.llmcad.pacer import pick_branch
from coinfer.models.base import Seq, SteerableModel
from coinfer.models.tree import TokenTree

__all__ = ["Branch", "TreeGrower", "forward_cost"]


def forward_cost(model: SteerableModel, learned: Learned) -> float:
    """Seconds one one-token forward of ``model`` takes on a fresh sequence, measured once
    per model and ``learned`` (after a first forward that warms it): the weights' cost,
    compute or reading them from storage, with no context to attend over."""
    return learned.of(model, "forward-cost", lambda: _measure_forward(model))


def _measure_forward(model: SteerableModel) -> float:
    seq = model.new_sequence()
    try:
        model.extend(seq, [0], last_only=True)
        model.truncate(seq, 0)
        t0 = time.perf_counter()
        model.extend(seq, [0], last_only=True)
        return time.perf_counter() - t0
    finally:
        model.release(seq)


@dataclass(eq=False)
class Branch:
    """A root-to-tip path of the tree and the draft sequence that decodes it.

    ``seq`` holds the context and the branch's tokens up to ``todo``: the tokens still to
    decode before the draft's distribution after the tip is known (the tip itself; at a
    round's start, the pending token and any context the draft has not read).
    """

    seq: Seq
    nodes: list[int]
    confidence: float
    todo: list[int]
    open: bool = True  # False once it ends in an end-of-generation token


class TreeGrower:
    """Grows one token tree per round with the draft model ``draft``."""

    def __init__(
        self,
        draft: SteerableModel,
        *,
        sampling: SamplingParams,
        branch_confidence: float,
        max_branches: int,
    ) -> None:
        self.draft = draft
        self.sampling = sampling
        self.branch_confidence = branch_confidence
        spare = None if draft.max_sequences is None else draft.max_sequences - draft.live_sequences - 1
        self.max_branches = max(1, max_branches if spare is None else min(max_branches, spare))
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.expected = 0.0  # the tokens the tree is expected to keep: its nodes' cumulative confidences
        self.branches = [Branch(draft.new_sequence(), [], 1.0, [])]

    # ---- a round ----------------------------------------------------------------------
    def start(self, context: list[int], chain: Sequence[tuple[int, float]] = ()) -> None:
        """Begin a tree after ``context`` (its last token pending): the one branch left
        from the last round is rolled back to what the target kept. ``chain``: tokens the
        draft already wrote after the context (speculation, §3.4) and their probabilities,
        the first branch of the new tree."""
        (root,) = self.branches
        self.tokens, self.parents, self.expected = [], [], 0.0
        todo = rewind_to(self.draft, root.seq, [*context, *(t for t, _ in chain)])
        branch = Branch(root.seq, [], 1.0, todo)
        for token, p in chain:
            branch.confidence *= p
            branch.nodes.append(self._add(token, branch.nodes[-1] if branch.nodes else -1, branch.confidence))
        branch.open = not chain or self._open(chain[-1][0])
        self.branches = [branch]

    def read(self, prompt: Sequence[int]) -> None:
        """Have the draft read ``prompt`` but its last token before the first round (which
        then decodes only that and the target's first token)."""
        (root,) = self.branches
        if len(prompt) > 1 and not root.seq.tokens:
            self.draft.extend(root.seq, list(prompt[:-1]), last_only=True)

    def tree(self) -> TokenTree:
        return TokenTree(tuple(self.tokens), tuple(self.parents))

    def branch_confidences(self) -> list[float]:
        return [b.confidence for b in self.branches]

    def grow(self, max_depth: int, max_size: int) -> bool:
        """One draft forward: expand the branch the pacer picks. False when no branch can
        grow (each ended, or is ``max_depth`` tokens long) or the tree holds ``max_size``."""
        if len(self.tokens) >= max_size:
            return False
        growable = [b.open and len(b.nodes) < max_depth for b in self.branches]
        lengths = [len(b.nodes) for b in self.branches]
        pick = pick_branch(self.branch_confidences(), lengths, len(self.tokens) + 1, growable)
        if pick is None:
            return False
        self._expand(self.branches[pick], max_size - len(self.tokens))
        return True

    def _expand(self, branch: Branch, max_new: int) -> None:
        """Decode the branch's tip; its most likely next token lengthens it, the other
        confident candidates start branches forked from it."""
        row = self.draft.extend(branch.seq, branch.todo, last_only=True)[-1]
        probs = self.confidence(row)
        parent = branch.nodes[-1] if branch.nodes else -1
        base = branch.confidence
        top, *others = self._candidates(probs)[:max_new]
        for token in others:
            confidence = base * float(probs[token])
            node = self._add(token, parent, confidence)
            fork = self.draft.fork(branch.seq)
            self.branches.append(Branch(fork, [*branch.nodes, node], confidence, [token], self._open(token)))
        branch.confidence = base * float(probs[top])
        branch.nodes.append(self._add(top, parent, branch.confidence))
        branch.todo = [top]
        branch.open = self._open(top)

    def confidence(self, logits: np.ndarray) -> np.ndarray:
        """The draft's distribution: as the request samples, or at temperature 1 when greedy
        (a greedy distribution is one-hot and says nothing of confidence)."""
        if self.sampling.greedy:
            x = np.asarray(logits, dtype=np.float64)
            p = np.exp(x - x.max())
            return p / p.sum()
        return probs_from_logits(logits, self.sampling)

    def _candidates(self, probs: np.ndarray) -> list[int]:
        """The most likely token, then every other above ``branch_confidence`` (most likely
        first) while branches are left."""
        room = self.max_branches - len(self.branches)
        n = min(room + 1, int(1 / self.branch_confidence) + 1, probs.size)
        best = np.argpartition(-probs, n - 1)[:n] if n < probs.size else np.arange(probs.size)
        ordered = sorted((int(t) for t in best), key=lambda t: -probs[t])
        return [ordered[0], *(t for t in ordered[1:] if probs[t] >= self.branch_confidence)]

    def _add(self, token: int, parent: int, confidence: float) -> int:
        self.tokens.append(token)
        self.parents.append(parent)
        self.expected += confidence
        return len(self.tokens) - 1

    def _open(self, token: int) -> bool:
        return token not in self.draft.eos_ids

    # ---- after verification -----------------------------------------------------------
    def matching_branch(self, accepted: Sequence[int]) -> Branch:
        """Eq. 3's most matching branch: of those holding the accepted path, the one it
        covers the most of (the shortest; the more confident on a tie); the most confident
        branch when nothing was kept."""
        if accepted:
            last = accepted[-1]
            holding = [b for b in self.branches if last in b.nodes]
            return max(holding, key=lambda b: (-len(b.nodes), b.confidence))
        return max(self.branches, key=lambda b: b.confidence)

    def settle(self, accepted: Sequence[int]) -> int:
        """Keep the branch holding ``accepted`` (its sequence serves the next round), free
        the others; the number of tokens that branch had (Eq. 3's ``N_all``)."""
        keep = self.matching_branch(accepted)
        for b in self.branches:
            if b is not keep:
                self.draft.release(b.seq)
        self.branches = [keep]
        return len(keep.nodes)

    def close(self) -> None:
        for b in self.branches:
            self.draft.release(b.seq)
        self.branches = []
