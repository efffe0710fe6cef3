"""all-MiniLM-L6-v2's encoder in NumPy: a 6-layer BERT, its weights read from the
package's safetensors file and its WordPiece tokenizer from its ``tokenizer.json``.

A retrieval process needs only this forward, and importing torch and transformers for
it costs several seconds of every ``coinfer rag`` process's start (about 8 s on a 2-core
machine), more than the embeddings of a small corpus take to compute. The arithmetic is
BERT's in float32 (post-layer-norm blocks, erf GELU, softmax attention over the real
tokens), so the vectors are transformers' to float32 rounding. A batch of
``TORCH_FROM`` texts or more (a large corpus indexed) goes to ``TorchMiniLM`` where torch
is installed, and every batch does where it is already imported (``torch_pays``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coinfer.errors import ConfigError, MissingDependencyError

__all__ = ["TORCH_FROM", "MiniLM", "TorchMiniLM", "torch_pays"]

# erf to within 1.5e-7 (Abramowitz and Stegun 7.1.26), below float32's resolution near 1
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)
_FF_ROWS = 256  # tokens per feed-forward block: its (rows, 1536) activations stay in the cache
# texts in one batch from which torch's forward (about 0.07 s a 256-token text faster on
# 2 cores than this one on one BLAS thread) repays its import (about 8 s): measured in
# docs/bench/dragon/one-off/
TORCH_FROM = 128


def _erf(x: np.ndarray) -> np.ndarray:
    """erf(x), in place over ``x``'s own float32 buffer where it can."""
    ax = np.abs(x)
    t = 1.0 / (1.0 + _ERF_P * ax)
    poly = _ERF_A[4] * t
    for a in (_ERF_A[3], _ERF_A[2], _ERF_A[1], _ERF_A[0]):
        poly += a
        poly *= t
    np.multiply(ax, ax, out=ax)
    np.negative(ax, out=ax)
    np.exp(ax, out=ax)
    poly *= ax
    np.subtract(1.0, poly, out=poly)
    return np.copysign(poly, x, out=poly)


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's ``gelu``: x Φ(x), with the exact (erf) Φ."""
    phi = _erf(x * np.float32(1 / np.sqrt(2.0)))
    phi += 1.0
    phi *= 0.5
    phi *= x
    return phi


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(np.float32)


@dataclass(frozen=True)
class _Config:
    layers: int
    heads: int
    hidden: int
    eps: float

    @classmethod
    def read(cls, path: Path) -> _Config:
        c = json.loads((path / "config.json").read_text())
        if c.get("model_type") != "bert" or c.get("hidden_act") != "gelu":
            raise ConfigError(
                f"{path} is not a BERT encoder with GELU", hint="point at all-MiniLM-L6-v2's model folder"
            )
        return cls(c["num_hidden_layers"], c["num_attention_heads"], c["hidden_size"], c["layer_norm_eps"])


class MiniLM:
    """The sentence encoder: ``encode(texts)`` gives each text's last hidden states with
    its mask of real tokens; ``DenseRetriever`` pools them."""

    def __init__(self, path: Path, *, max_length: int = 256) -> None:
        try:
            from safetensors.numpy import load_file
            from threadpoolctl import ThreadpoolController
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise MissingDependencyError("tokenizers, safetensors and threadpoolctl", "rag") from exc
        self._blas = ThreadpoolController()
        self.config = _Config.read(path)
        self._w = load_file(str(path / "model.safetensors"))
        self._tokenizer: Any = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")  # to the longest in a batch

    def tokenize(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and the mask of real tokens, (b, t) each, padded to the longest."""
        encodings = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        return ids, mask

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The last hidden states (b, t, hidden) and the mask (b, t)."""
        ids, mask = self.tokenize(texts)
        # one BLAS thread: OpenBLAS's idle threads spin beside a model decoding on the same
        # cores (DRAGON re-scores its documents as it writes). The halved tokens/s first laid
        # at their door was mostly two llama.cpp processes sharing two cores
        # (docs/bench/dragon/one-off/demo_row_ab.txt)
        with self._blas.limit(limits=1, user_api="blas"):
            x = self._embed(ids)
            bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]  # padded keys get no weight
            for i in range(self.config.layers):
                x = self._block(x, bias, f"encoder.layer.{i}.")
        return x, mask

    def _embed(self, ids: np.ndarray) -> np.ndarray:
        w, eps = self._w, self.config.eps
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][: ids.shape[1]][None]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        return _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        y = x.reshape(-1, x.shape[-1]) @ self._w[name + ".weight"].T  # one GEMM over every token
        y += self._w[name + ".bias"]
        return y.reshape(*x.shape[:-1], y.shape[-1])

    def _block(self, x: np.ndarray, bias: np.ndarray, p: str) -> np.ndarray:
        """One post-layer-norm transformer block: self-attention, then the feed-forward."""
        w, eps = self._w, self.config.eps
        q = self._linear(x, p + "attention.self.query")
        k, v = self._linear(x, p + "attention.self.key"), self._linear(x, p + "attention.self.value")
        attended = np.stack([self._attend(q[i], k[i], v[i], bias[i]) for i in range(len(x))])
        x = _layer_norm(
            x + self._linear(attended, p + "attention.output.dense"),
            w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps,
        )  # fmt: skip
        return _layer_norm(
            x + self._feed_forward(x, p),
            w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps,
        )  # fmt: skip

    def _attend(self, q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """One sequence's multi-head attention, (t, hidden) each: its scores (heads, t, t)
        stay in the cache, where a whole batch's would not."""
        t, hidden = q.shape
        heads = self.config.heads
        d = hidden // heads
        qh = q.reshape(t, heads, d).transpose(1, 0, 2) * np.float32(1 / np.sqrt(d))
        scores = qh @ k.reshape(t, heads, d).transpose(1, 2, 0)
        scores += bias
        scores -= scores.max(-1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(-1, keepdims=True)
        return (scores @ v.reshape(t, heads, d).transpose(1, 0, 2)).transpose(1, 0, 2).reshape(t, hidden)

    def _feed_forward(self, x: np.ndarray, p: str) -> np.ndarray:
        """GELU between two projections, a block of tokens at a time (each token's own)."""
        flat = x.reshape(-1, x.shape[-1])
        out = np.empty_like(flat)
        for i in range(0, len(flat), _FF_ROWS):
            inner = _gelu(self._linear(flat[i : i + _FF_ROWS], p + "intermediate.dense"))
            out[i : i + _FF_ROWS] = self._linear(inner, p + "output.dense")
        return out.reshape(x.shape)


class TorchMiniLM:
    """The same encoder on torch through transformers' ``BertModel``: faster per text
    (about 1.8x on 2 cores, where torch runs on both and this encoder on one BLAS thread), for
    a batch large enough to repay torch's import."""

    def __init__(self, path: Path, *, max_length: int = 256) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch, self.max_length = torch, max_length
        self._tokenizer = AutoTokenizer.from_pretrained(path)
        self._model = AutoModel.from_pretrained(path).eval()

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        batch = self._tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        with self._torch.inference_mode():
            hidden = self._model(**batch).last_hidden_state
        return hidden.float().numpy(), batch["attention_mask"].float().numpy()


def torch_pays(texts: int, *, imported: bool, installed: bool) -> bool:
    """Whether to encode ``texts`` on torch: when it is already imported (free), or when
    it is installed and the batch is at least ``TORCH_FROM`` texts, where its faster
    forward repays the seconds its import costs."""
    return imported or (installed and texts >= TORCH_FROM)
