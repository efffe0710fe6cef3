"""Self-drafting heads as a drafter of the speculative loop (Medusa-1 on one device;
``coinfer generate --draft heads:DIR``).

The target keeps each forward's final-norm hidden states next to its logits (llama.cpp
loaded with ``hidden_states=True``). The row that chose the target's own latest token is
the one the heads read: after the prompt, the prompt's last row; after a verification,
the row after the accepted drafts (``feedback`` learns which). Head k's residual block
then goes through the target's own output projection, taken from its GGUF file, to guess
the token k places after that one: a chain of up to K guesses per round, verified by the
target in its next forward as any draft is. The guesses are taken among the tokens the
heads were trained to predict (their ``vocab``): a full-vocabulary projection per head
would cost more than the target's forward on a CPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coinfer.decoding.drafters import Draft, Drafter
from coinfer.errors import ConfigError
from coinfer.models.base import SteerableModel
from coinfer.models.heads import DraftHeads

__all__ = ["HEADS_PREFIX", "HeadsDrafter", "open_heads_drafter"]

HEADS_PREFIX = "heads:"


class HeadsDrafter(Drafter):
    """Guesses from ``heads`` on ``target``'s last hidden state, for one request at a time."""

    name = "heads"
    model = None  # drafting runs no model forward: a few small matrix products

    def __init__(
        self, target: SteerableModel, heads: DraftHeads, output: np.ndarray, vocab: np.ndarray
    ) -> None:
        if output.shape != (len(vocab), heads.meta.hidden):
            raise ConfigError(
                f"an output projection of shape {output.shape} does not fit {heads.meta.hidden} wide heads"
            )
        self.target = target
        k, d = heads.k, heads.meta.hidden
        # the K blocks stacked, (K * d, d): all heads' first step in one matrix-vector product
        self.weight = np.ascontiguousarray(heads.weight.float().numpy().reshape(k * d, d))
        self.bias = heads.bias.float().numpy()  # (K, d)
        self.output, self.vocab = output, vocab
        self._row = -1  # the row of the target's latest forward that chose its own token

    @property
    def k(self) -> int:
        return len(self.bias)

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[Draft]:
        if len(contexts) != 1:
            raise ConfigError(
                "draft heads draft for one request at a time",
                hint="batches and several drafts need --draft ngram or a draft model",
            )
        hidden = self.target.last_hidden()
        n = min(k, self.k)
        if n <= 0 or not len(hidden):
            return [Draft([])]
        return [Draft(self.guess_chain(hidden[self._row], n))]

    def guess_chain(self, hidden: np.ndarray, n: int) -> list[int]:
        """Heads 1..n's best guess from one hidden state: ``h + SiLU(W_k h + b_k)``, then
        the output projection, argmax among ``vocab``."""
        d = len(hidden)
        z = (self.weight[: n * d] @ hidden).reshape(n, d) + self.bias[:n]
        residual = hidden + z * 0.5 * (1.0 + np.tanh(0.5 * z))  # SiLU: z * sigmoid(z)
        return [int(t) for t in self.vocab[np.argmax(residual @ self.output.T, axis=1)]]

    def feedback(self, key: int, context: Sequence[int], kept: Sequence[int]) -> None:
        self._row = len(kept) - 1  # row i of a verification follows i accepted drafts

    def forget(self, key: int) -> None:
        self._row = -1


def open_heads_drafter(spec: str, target: SteerableModel) -> HeadsDrafter:
    """``heads:DIR``: the heads trained for ``target`` (a llama.cpp model loaded with
    ``hidden_states=True``), its output projection read from its GGUF file."""
    from coinfer.models.gguf_layout import output_rows

    folder = Path(spec.removeprefix(HEADS_PREFIX))
    heads = DraftHeads.load(folder)
    if heads.meta.model != target.name:
        raise ConfigError(
            f"the heads in {folder} were trained for {heads.meta.model}, not {target.name}",
            hint=f"pass -m {heads.meta.model}, or train heads for the target with coinfer edge train-heads",
        )
    gguf = getattr(target, "path", None)
    if target.backend != "llama.cpp" or gguf is None:
        raise ConfigError("draft heads draft for a llama.cpp target", hint="pass --backend llama.cpp")
    target.last_hidden()  # refuses a target that keeps no hidden states
    vocab = np.arange(target.vocab_size) if heads.vocab is None else heads.vocab.numpy()
    return HeadsDrafter(target, heads, output_rows(gguf, vocab), vocab)
