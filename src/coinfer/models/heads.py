"""Self-drafting heads (Medusa-1, Cai et al. 2024; paper 004 §V-A): K small residual blocks
on the target's last hidden state, each feeding the target's own frozen ``lm_head``.

At position i the target's head predicts token i + 1; draft head k (1..K) predicts token
i + 1 + k from the same hidden state, so one forward yields the next token and K guesses
after it. Head k is ``h + SiLU(W_k h + b_k)``, then ``lm_head``; ``W_k`` and ``b_k`` start
at zero (the head starts as the target's own next-token guess) and are the only weights
trained.

Shapes: ``hidden`` (n, d) -> ``residual`` (n, K, d) -> ``logits`` (n, K, vocab). The heads
are saved as ``heads.safetensors`` (fp16) with ``heads.json``, which names the model they
were trained for (its config's digest), so heads meet only their own model.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coinfer.errors import ConfigError, ModelError

__all__ = ["DraftHeads", "HeadsMeta", "config_digest"]

WEIGHTS, META = "heads.safetensors", "heads.json"


def config_digest(folder: str | Path) -> str:
    """A model's identity for its heads: the digest of its ``config.json``."""
    config = Path(folder) / "config.json"
    if not config.is_file():
        raise ModelError(f"{folder} has no config.json", hint="pass a transformers model folder")
    return hashlib.sha256(config.read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class HeadsMeta:
    """What the heads were trained for and how well they did (held-out top-1 per head)."""

    model: str
    digest: str
    hidden: int
    heads: int
    accuracy: list[float] = field(default_factory=list)
    trained: dict[str, Any] = field(default_factory=dict)


class DraftHeads:
    """K residual blocks; ``lm_head`` (the target's, frozen) is passed to each call."""

    def __init__(self, weight: Any, bias: Any, meta: HeadsMeta, vocab: Any = None) -> None:
        if tuple(weight.shape) != (meta.heads, meta.hidden, meta.hidden) or tuple(bias.shape) != (
            meta.heads,
            meta.hidden,
        ):
            raise ModelError(
                f"heads of shape {tuple(weight.shape)} do not match {meta.heads} heads of width {meta.hidden}"
            )
        self.weight, self.bias, self.meta = weight, bias, meta
        self.vocab = vocab  # the token ids the heads were trained to predict (None: all)
        self._rows: tuple[Any, Any] | None = None  # (lm_head, its rows for ``vocab``)

    @classmethod
    def zeros(cls, *, model: str, digest: str, hidden: int, heads: int) -> DraftHeads:
        """Untrained heads: each guesses what the target's own head guesses."""
        import torch

        if heads < 1:
            raise ConfigError(f"need at least one head, got {heads}")
        meta = HeadsMeta(model, digest, hidden, heads)
        return cls(torch.zeros(heads, hidden, hidden), torch.zeros(heads, hidden), meta)

    @property
    def k(self) -> int:
        return self.meta.heads

    def to(self, device: Any) -> DraftHeads:
        """The same heads with their tensors on ``device`` (a GPU stage runs them there)."""
        vocab = None if self.vocab is None else self.vocab.to(device)
        return DraftHeads(self.weight.to(device), self.bias.to(device), self.meta, vocab)

    def residual(self, hidden: Any) -> Any:
        """(n, d) last hidden states -> (n, K, d): each head's input to ``lm_head``."""
        import torch

        h = hidden.to(self.weight.dtype)
        z = torch.einsum("nd,ked->nke", h, self.weight) + self.bias
        return h.unsqueeze(1) + torch.nn.functional.silu(z)

    def logits(self, hidden: Any, lm_head: Any) -> Any:
        """(n, d) -> (n, K, vocab), in the head's dtype (a bf16 model's on a GPU)."""
        return lm_head(self.residual(hidden).to(lm_head.weight.dtype))

    def guesses(self, hidden: Any, lm_head: Any, top: int = 1) -> Any:
        """(n, d) -> (n, K, top) token ids: each head's ``top`` best, best first."""
        return self.logits(hidden, lm_head).topk(top, dim=-1).indices

    def vocab_guesses(self, hidden: Any, lm_head: Any, top: int = 1) -> Any:
        """``guesses`` among ``vocab`` (every token when None), for decoding: on a CPU a
        full-vocabulary projection per head costs about what a forward of the model's
        body does."""
        import torch

        with torch.inference_mode():
            if self.vocab is None:
                return self.guesses(hidden, lm_head, top)
            weight, bias = self._vocab_rows(lm_head)
            scores = self.residual(hidden).to(weight.dtype) @ weight.T
            if bias is not None:
                scores = scores + bias
            return self.vocab[scores.topk(top, dim=-1).indices]

    def _vocab_rows(self, lm_head: Any) -> tuple[Any, Any]:
        """``lm_head``'s weight rows (and bias) for ``vocab``, taken once."""
        if self._rows is None or self._rows[0] is not lm_head:
            bias = getattr(lm_head, "bias", None)
            rows = (lm_head.weight[self.vocab].contiguous(), None if bias is None else bias[self.vocab])
            self._rows = (lm_head, rows)
        return self._rows[1]

    # ---- files -------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        import torch
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {"weight": self.weight.half().contiguous(), "bias": self.bias.half().contiguous()}
        if self.vocab is not None:
            tensors["vocab"] = self.vocab.to(torch.int32).contiguous()
        tmp = folder / (WEIGHTS + ".tmp")
        save_file(tensors, str(tmp))
        tmp.replace(folder / WEIGHTS)
        (folder / META).write_text(json.dumps(asdict(self.meta), indent=1) + "\n")

    @classmethod
    def load(cls, folder: str | Path, *, digest: str | None = None) -> DraftHeads:
        """Heads from ``folder``; with ``digest``, refused unless trained for that model."""
        from safetensors.torch import load_file

        folder = Path(folder)
        if not (folder / META).is_file() or not (folder / WEIGHTS).is_file():
            raise ConfigError(
                f"{folder} holds no draft heads ({META} and {WEIGHTS})",
                hint="train them with: coinfer edge train-heads -m MODEL --out DIR",
            )
        meta = HeadsMeta(**json.loads((folder / META).read_text()))
        if digest is not None and meta.digest != digest:
            raise ConfigError(
                f"the heads in {folder} were trained for {meta.model}, not this model",
                hint="train heads for this model with coinfer edge train-heads",
            )
        tensors = load_file(str(folder / WEIGHTS))
        vocab = tensors["vocab"].long() if "vocab" in tensors else None
        return cls(tensors["weight"].float(), tensors["bias"].float(), meta, vocab)
