"""Speculative generation during verification (§3.4).

While the target verifies a tree, the draft would sit idle; instead it keeps lengthening
the most confident branch on its own thread, one greedy token at a time. If the target
then keeps that whole branch and chooses the token the draft went on with, the rest of
what the draft wrote is the start of the next tree (kept); otherwise it is dropped
(discarded) and the next round rolls the draft back. llama.cpp and torch release the GIL
inside a forward, so the two models run at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from coinfer.engines.llmcad.tree_draft import Branch
from coinfer.models.base import SteerableModel

__all__ = ["Speculator"]

Chain = list[tuple[int, float]]  # (token, the draft's probability of it)


class Speculator:
    """Runs the draft on ``branch`` in a worker thread between ``begin`` and ``end``."""

    def __init__(self, draft: SteerableModel, confidence: Callable[[np.ndarray], np.ndarray]) -> None:
        self.draft = draft
        self._confidence = confidence
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="llmcad-speculate")
        self._stop = threading.Event()
        self._future: Future[Chain] | None = None
        self.branch: Branch | None = None

    def begin(self, branch: Branch, limit: int) -> None:
        """Start writing up to ``limit`` tokens after ``branch``'s tip."""
        self._stop.clear()
        self.branch = branch
        self._future = self._pool.submit(self._run, branch, limit) if limit > 0 and branch.open else None

    def _run(self, branch: Branch, limit: int) -> Chain:
        out: Chain = []
        todo = list(branch.todo)
        while len(out) < limit and not self._stop.is_set():
            probs = self._confidence(self.draft.extend(branch.seq, todo, last_only=True)[-1])
            token = int(np.argmax(probs))
            out.append((token, float(probs[token])))
            if token in self.draft.eos_ids:
                break
            todo = [token]
        return out

    def end(self) -> Chain:
        """Stop the worker after its current forward; the tokens it wrote."""
        self._stop.set()
        future, self._future = self._future, None
        return [] if future is None else future.result()

    def close(self) -> None:
        self.end()
        self._pool.shutdown(wait=True)
