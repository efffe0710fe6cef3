"""The fake of the steerable-model contract: a model whose greedy choice is a function of
the tokens before it. Tokens 0..255 are bytes and 256 ends a turn, so text round-trips;
the full contract holds (chains, trees, truncate, commit, release), so engines can be
tested without any weights."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from coinfer.models.base import CheckedForward, Seq, SteerableModel
from coinfer.models.chat_template import ChatTemplate
from coinfer.models.tree import TokenTree

__all__ = ["EOS", "ScriptedModel", "script"]

EOS = 256


class ScriptedModel(SteerableModel):
    """``next_token(prefix)`` is the greedy token after ``prefix`` (its logit 10, the rest 0),
    or a distribution ``{token: probability}`` after it (the logits are their logs; a token
    left out has probability about 1e-13), for engines that read a model's confidence.

    ``released``: ids of released sequences; ``restored``: of sequences made from a saved
    state (``restore``); ``forwards``: the token count of every forward
    (``extend`` and each ``extend_many`` item); ``threads``: every ``set_threads`` count.
    For requests served together (``SharedModel``): ``batch_sizes``, the forwards each
    ``extend_batch`` merged; every ``extend_batch`` waits for the event ``go`` (set: no
    wait; clear it so that requests started together queue behind the first) and then
    takes ``forward_s`` seconds, as a real model's forward would.
    """

    name = "scripted"
    backend = "fake"
    vocab_size = 257
    eos_ids = frozenset({EOS})
    template = ChatTemplate(source=None)

    def __init__(
        self,
        next_token: Callable[[list[int]], int | Mapping[int, float]],
        *,
        n_ctx: int = 64,
        name: str = "scripted",
    ) -> None:
        super().__init__()
        self.next_token = next_token
        self.n_ctx = n_ctx
        self.name = name
        self.released: list[int] = []
        self.restored: list[int] = []  # sequences made from a saved state
        self.forwards: list[int] = []
        self.threads: list[int] = []
        self._threads = 1
        self.batch_sizes: list[int] = []
        self.go, self.forward_s = threading.Event(), 0.0
        self.go.set()

    def tokenize(self, text: str, *, special: bool = False, add_bos: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def detokenize(self, ids: Sequence[int]) -> str:
        """Byte runs decoded as UTF-8; the end-of-turn token rendered as ``</s>``."""
        out, run = [], bytearray()
        for t in ids:
            if t == EOS:
                out += [run.decode("utf-8", "replace"), "</s>"]
                run.clear()
            else:
                run.append(t)
        return "".join([*out, run.decode("utf-8", "replace")])

    def set_threads(self, n: int) -> int | None:
        self.threads.append(n)
        previous, self._threads = self._threads, n
        return previous

    def _row(self, prefix: list[int]) -> np.ndarray:
        choice = self.next_token(prefix)
        if isinstance(choice, Mapping):
            row = np.full(self.vocab_size, -30.0, dtype=np.float32)
            for token, p in choice.items():
                row[token] = np.log(p)
            return row
        row = np.zeros(self.vocab_size, dtype=np.float32)
        row[choice] = 10.0
        return row

    def _extend(self, seq: Seq, ids: list[int], tree: TokenTree | None, last_only: bool) -> np.ndarray:
        self.forwards.append(len(ids))
        if tree is None:
            prefixes = [seq.tokens + ids[: j + 1] for j in range(len(ids))]
        else:
            prefixes = [seq.tokens + [ids[n] for n in tree.path_to(j)] for j in range(len(ids))]
        rows = [self._row(p) for p in prefixes]
        return np.stack(rows[-1:] if last_only else rows)

    def _extend_batch(self, forwards: list[CheckedForward]) -> list[np.ndarray]:
        self.go.wait(10)
        time.sleep(self.forward_s)
        self.batch_sizes.append(len(forwards))
        return super()._extend_batch(forwards)

    def _fork(self, source: Seq, new: Seq) -> None:
        return None  # the base class copies the tokens; nothing else is cached

    def _save_state(self, seq: Seq) -> bytes | None:
        return bytes(len(seq.tokens))  # nothing is cached but the tokens: a byte a token, for budgets

    def _restore(self, seq: Seq, data: bytes | bytearray) -> None:
        self.restored.append(seq.id)

    def _commit_path(self, seq: Seq, path: list[int]) -> None:
        return None  # the base class keeps the tokens; nothing else is cached

    def _truncate(self, seq: Seq, length: int) -> None:
        return None

    def _release(self, seq: Seq) -> None:
        self.released.append(seq.id)


def script(prompt_len: int, out: Sequence[int], then: int = ord("z")) -> Callable[[list[int]], int]:
    """A ``next_token`` that emits ``out`` after a prompt of ``prompt_len`` tokens, then
    ``then`` forever."""

    def next_token(prefix: list[int]) -> int:
        i = len(prefix) - prompt_len
        return out[i] if 0 <= i < len(out) else then

    return next_token
