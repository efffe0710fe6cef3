"""Chunks of documents and the retriever contract: index chunks, return the top k for a query."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from coinfer.errors import ConfigError

__all__ = ["Chunk", "Retriever", "chunk_documents"]


@dataclass(frozen=True)
class Chunk:
    """A piece of a document: which document, where it starts (characters), its text."""

    doc: str
    start: int
    text: str


class Retriever(Protocol):
    def index(self, chunks: Sequence[Chunk]) -> None: ...

    def top(self, query: str, k: int) -> list[Chunk]:
        """The k chunks most relevant to ``query``, best first."""
        ...

    def scored(self, query: str, k: int) -> list[tuple[Chunk, float]]:
        """``top`` with each chunk's score (the retriever's own scale), best first."""
        ...


def chunk_documents(
    documents: Sequence[tuple[str, str]], size: int = 1000, overlap: int = 100
) -> list[Chunk]:
    """Every document cut into pieces of ``size`` characters overlapping by ``overlap``
    (paper 000 found 1000 characters best for its RAG baseline), cut at a line break where
    one falls in the last fifth of a piece."""
    if size < 50 or not 0 <= overlap < size // 2:
        raise ConfigError(f"need size >= 50 and 0 <= overlap < size / 2, got {size}, {overlap}")
    chunks = []
    for name, text in documents:
        start = 0
        while start < len(text):
            end = min(len(text), start + size)
            cut = text.rfind("\n", start + size * 4 // 5, end)
            end = cut + 1 if end < len(text) and cut > start else end
            if text[start:end].strip():
                chunks.append(Chunk(name, start, text[start:end]))
            if end >= len(text):
                break
            start = max(end - overlap, start + 1)
    return chunks
