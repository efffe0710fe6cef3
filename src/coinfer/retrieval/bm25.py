"""BM25 over chunks, by way of ``bm25s`` (the ``rag`` extra)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coinfer.errors import ConfigError, MissingDependencyError
from coinfer.retrieval.base import Chunk

__all__ = ["BM25Retriever"]


class BM25Retriever:
    """Lexical retrieval: identifiers and exact words (code, configuration, numbers)."""

    def __init__(self) -> None:
        try:
            import bm25s
        except ImportError as exc:
            raise MissingDependencyError("bm25s", "rag") from exc
        self._bm25s: Any = bm25s
        self._chunks: list[Chunk] = []
        self._index: Any = None

    def index(self, chunks: Sequence[Chunk]) -> None:
        if not chunks:
            raise ConfigError("nothing to index: no chunks")
        self._chunks = list(chunks)
        tokens = self._bm25s.tokenize([c.text for c in self._chunks], stopwords="en", show_progress=False)
        self._index = self._bm25s.BM25()
        self._index.index(tokens, show_progress=False)

    def top(self, query: str, k: int) -> list[Chunk]:
        return [c for c, _ in self.scored(query, k)]

    def scored(self, query: str, k: int) -> list[tuple[Chunk, float]]:
        """The top k chunks with their BM25 scores, best first."""
        if self._index is None:
            raise ConfigError("index() the chunks before asking for the top ones")
        k = min(k, len(self._chunks))
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
        ids, scores = self._index.retrieve(tokens, k=k, show_progress=False)
        return [(self._chunks[int(i)], float(s)) for i, s in zip(ids[0], scores[0], strict=True)]
