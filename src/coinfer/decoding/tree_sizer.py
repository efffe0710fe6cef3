"""Which of the heads' candidates to verify each round: the candidate tree cut to what pays.

Medusa's sparse trees are tuned once per model and GPU, where verifying many nodes costs
about what one costs. On a CPU each node costs a share of a forward, and heads that guess
poorly for a kind of text (heads trained on code, asked about sleep) make any tree slower
than none. ``TreeSizer`` picks, per round, how many of the candidate choices (Medusa's
sparse-tree notation, ``decoding.self_draft``) to verify:

* **Acceptance, in hindsight.** The target's text does not depend on the tree (greedy, or
  a seeded draw per position), so once the K tokens after a round's pending token are
  known, every choice's path is known to have held or not, verified or not. Each choice's
  chance ``p(c)`` is a decayed share of the rounds in which its path held (``memory``),
  started from a prior worth ``prior_weight`` rounds. A child's path holds only where its
  parent's does, so the choices in order of ``p`` (parents first on ties) make a tree at
  every prefix.
* **Cost, measured.** Seconds per round by node count (the pending tokens plus their
  candidates; outline decoding verifies several texts' trees in one round): an
  exponential moving average per count, linear between measured counts, the largest
  measured count's cost past it (optimistic, so that a larger tree is tried when the
  guesses promise it would pay). The first rounds measure the pending tokens alone and
  then every candidate.
* **Choice.** The prefix of ``s`` choices that maximises ``(1 + p_1 + … + p_s) / cost(s + 1)``,
  the expected tokens per second; ``s = 0`` (plain decoding, the pending token alone)
  unless the best promises ``required_gain`` more. Every ``probe_every`` rounds the
  runner-up size runs instead, so that the costs near the choice stay measured.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence

from coinfer.decoding.draft_length import within_measured
from coinfer.errors import ConfigError

__all__ = ["TreeSizer", "choice_prior", "path_holds"]

Choice = tuple[int, ...]


def choice_prior(choice: Choice) -> float:
    """Before any round: a path of d best guesses holds with 0.5^d, a lower guess at any
    depth halves its chance again (a child never above its parent)."""
    return 0.5 ** (len(choice) + sum(1 for j in choice if j > 0))


def path_holds(choice: Choice, guesses: Sequence[Sequence[int]], after: Sequence[int]) -> bool:
    """Whether the path ``choice`` names in the ``guesses`` table is what came ``after``."""
    return all(
        d < len(guesses) and j < len(guesses[d]) and d < len(after) and guesses[d][j] == after[d]
        for d, j in enumerate(choice)
    )


class TreeSizer:
    """Per round, the choices worth verifying; fed the heads' guesses and the tokens the
    target produced (``observe``), and each round's node count and seconds (``timed``)."""

    def __init__(
        self,
        choices: Sequence[Sequence[int]],
        *,
        memory: float = 0.97,
        prior_weight: float = 2.0,
        alpha: float = 0.3,
        required_gain: float = 1.03,
        probe_every: int = 24,
    ) -> None:
        if not 0 < memory <= 1 or not 0 < alpha <= 1 or prior_weight <= 0 or probe_every < 2:
            raise ConfigError("memory and alpha must be in (0, 1], prior_weight > 0, probe_every >= 2")
        self.choices = [tuple(int(j) for j in c) for c in choices]
        known = set(self.choices)
        if any(len(c) > 1 and c[:-1] not in known for c in self.choices):
            raise ConfigError("every choice's prefix must be a choice too")
        self.depth = max((len(c) for c in self.choices), default=0)
        self.memory, self.alpha, self.gain, self.probe_every = memory, alpha, required_gain, probe_every
        self.held = [choice_prior(c) * prior_weight for c in self.choices]
        self.seen = prior_weight
        self.cost: dict[int, float] = {}  # nodes -> seconds per round
        self.produced: dict[int, list[int]] = {}  # per stream (a branch of outline decoding)
        self.waiting: dict[int, deque[tuple[int, list[list[int]]]]] = {}  # (root's index, guesses)
        self.sizes: Counter[int] = Counter()  # rounds per number of choices verified

    # ---- what the rounds teach -----------------------------------------------------------
    def observe(self, guesses: Sequence[Sequence[int]], emitted: Sequence[int], stream: int = 0) -> None:
        """A round's ``emitted`` tokens, and the ``guesses`` table (``guesses[d][j]``) the
        heads made for the places after its last one, for one text (``stream``: several
        decoded at once); its rounds whose K places are all known now are scored."""
        produced = self.produced.setdefault(stream, [])
        waiting = self.waiting.setdefault(stream, deque())
        produced += [int(t) for t in emitted]
        waiting.append((len(produced) - 1, [list(map(int, g)) for g in guesses]))
        while waiting and waiting[0][0] + self.depth < len(produced):
            root, table = waiting.popleft()
            self._score(table, produced[root + 1 : root + 1 + self.depth])

    def _score(self, table: list[list[int]], after: list[int]) -> None:
        self.seen = self.seen * self.memory + 1
        for i, c in enumerate(self.choices):
            self.held[i] = self.held[i] * self.memory + path_holds(c, table, after)

    def timed(self, nodes: int, seconds: float) -> None:
        """A round of ``nodes`` nodes in all (every stream's) took ``seconds``."""
        old = self.cost.get(nodes)
        self.cost[nodes] = seconds if old is None else (1 - self.alpha) * old + self.alpha * seconds

    # ---- the choice ----------------------------------------------------------------------
    def ranked(self) -> list[Choice]:
        """The choices by their chance of holding, each after its parent."""
        p = [h / self.seen for h in self.held]
        order = sorted(range(len(self.choices)), key=lambda i: (-p[i], len(self.choices[i]), i))
        out: list[Choice] = []
        placed: set[Choice] = set()
        while order:
            i = next(i for i in order if len(self.choices[i]) == 1 or self.choices[i][:-1] in placed)
            order.remove(i)
            out.append(self.choices[i])
            placed.add(self.choices[i])
        return out

    def round_cost(self, nodes: int) -> float:
        measured = within_measured(self.cost, nodes)
        if measured is not None:
            return measured
        below = [m for m in self.cost if m <= nodes]
        return self.cost[max(below)] if below else self.cost[min(self.cost)]

    def rates(self, ranked: Sequence[Choice], streams: int = 1) -> list[float]:
        """Expected tokens per second for each prefix size 0…len(ranked) of the choices in
        ``ranked``'s order, with ``streams`` pending tokens each under its own tree."""
        chance = {c: h / self.seen for c, h in zip(self.choices, self.held, strict=True)}
        out, expected = [], 1.0
        for s, c in enumerate([None, *ranked]):
            expected += chance[c] if c is not None else 0.0
            out.append(streams * expected / self.round_cost(streams * (s + 1)))
        return out

    def choose(self, streams: int = 1) -> list[Choice]:
        """This round's choices (none: the pending token alone), each of ``streams``
        pending tokens under its own tree."""
        full, ranked = len(self.choices), self.ranked()
        if not full or not self.cost or (len(self.cost) < 2 and min(self.cost) > streams):
            size = 0  # first the pending tokens alone ...
        elif len(self.cost) < 2:
            size = full  # ... then every candidate
        else:
            rates = self.rates(ranked, streams)
            best = max(range(len(rates)), key=lambda s: rates[s])
            if rates[best] < self.gain * rates[0]:
                best = 0
            size = best
            if (self.sizes.total() + 1) % self.probe_every == 0:
                size = max((s for s in range(len(rates)) if s != best), key=lambda s: rates[s])
        self.sizes[size] += 1
        return ranked[:size]

    def summary(self) -> dict[str, float | int]:
        """What the sizer did: rounds, rounds with no candidates, mean candidates verified."""
        rounds = self.sizes.total()
        mean = sum(s * n for s, n in self.sizes.items()) / rounds if rounds else 0.0
        return {"rounds": rounds, "plain_rounds": self.sizes[0], "mean_candidates": round(mean, 2)}
