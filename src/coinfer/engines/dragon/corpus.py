"""A side's private corpus (paper 003, §2.2): chunked and indexed once, asked per query.

Chunks are ranked by BM25, by MiniLM embeddings, or by both fused with reciprocal rank
(``1/(60 + rank)`` summed, Cormack et al. 2009). Whatever ranks them, a chosen chunk's
relevance ``R(d, x)`` is its embedding similarity to the query over
``relevance_temperature``: BM25 scores depend on each corpus's statistics, so only the
embeddings put the device's and the cloud's documents on one scale, which Eq. 4's
weights need. ``rescorer`` gives the dynamic weights of §4: the same similarity, against
the question and the text generated so far.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from coinfer.engines.dragon.config import Retrieval
from coinfer.engines.dragon.side import Document, Rescore
from coinfer.errors import ConfigError
from coinfer.retrieval import BM25Retriever, Chunk, DenseRetriever, chunk_documents

__all__ = ["Corpus", "Rescore", "read_corpus"]

_RRF_K = 60
_CONTEXT_CHARS = 1200  # the latest generated text a re-scoring reads (MiniLM reads 256 tokens)
_SUFFIXES = (".txt", ".md", ".rst", ".py")


def read_corpus(folder: str | Path) -> list[tuple[str, str]]:
    """Every text file under ``folder`` (.txt, .md, .rst, .py) as (relative path, text)."""
    root = Path(folder)
    if not root.is_dir():
        raise ConfigError(f"no corpus folder at {root}", hint="pass --corpus DIR, a folder of text files")
    docs = [
        (str(p.relative_to(root)), p.read_text(encoding="utf-8", errors="replace"))
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.suffix in _SUFFIXES
    ]
    if not docs:
        raise ConfigError(
            f"{root} holds no .txt, .md, .rst or .py files", hint="point --corpus at your documents"
        )
    return docs


class Corpus:
    """Chunks of ``documents`` with a BM25 and an embedding index."""

    def __init__(self, documents: Sequence[tuple[str, str]], *, chunk_chars: int = 400) -> None:
        self.chunks = chunk_documents(documents, chunk_chars, overlap=chunk_chars // 10)
        if not self.chunks:
            raise ConfigError("the corpus has no text to index")
        self.dense = DenseRetriever()
        self.dense.index(self.chunks)
        self.bm25 = BM25Retriever()
        self.bm25.index(self.chunks)

    def retrieve(
        self, query: str, k: int, *, how: Retrieval = "fused", temperature: float = 0.1
    ) -> list[Document]:
        """The ``k`` chunks most relevant to ``query``, best first, as documents whose
        relevance is their embedding similarity over ``temperature``."""
        similarity = dict(self.dense.scored(query, len(self.chunks)))
        picked = self._rank(query, k, how, similarity)
        return [Document(f"{c.doc}@{c.start}", c.text, similarity[c] / temperature) for c in picked]

    def _rank(self, query: str, k: int, how: Retrieval, similarity: dict[Chunk, float]) -> list[Chunk]:
        by_dense = list(similarity)  # best first
        if how == "dense":
            return by_dense[:k]
        by_bm25 = self.bm25.top(query, len(self.chunks))
        if how == "bm25":
            return by_bm25[:k]
        fused: dict[Chunk, float] = {}
        for ranking in (by_dense, by_bm25):
            for rank, chunk in enumerate(ranking):
                fused[chunk] = fused.get(chunk, 0.0) + 1.0 / (_RRF_K + rank + 1)
        return sorted(fused, key=lambda c: -fused[c])[:k]

    def rescorer(self, question: str, *, temperature: float = 0.1) -> Rescore:
        """Dynamic weights: each document's relevance against the question and the text
        generated so far (its last ``_CONTEXT_CHARS``), on the scale of ``retrieve``."""
        vectors: dict[str, np.ndarray] = {}

        def rescore(documents: Sequence[Document], text: str) -> np.ndarray:
            missing = [d.text for d in documents if d.text not in vectors]
            if missing:
                vectors.update(zip(missing, self.dense.embed(missing), strict=True))
            query = self.dense.embed([f"{question}\n{text[-_CONTEXT_CHARS:]}"])[0]
            return np.array([float(vectors[d.text] @ query) for d in documents]) / temperature

        return rescore
