"""The RAG baseline of paper 000 (§6.5): retrieve the chunks nearest the question locally
and send only those, with the question, to the remote model.

The paper's RAG used chunks of 1000 characters (its best on FinanceBench) and BM25 or
embeddings; the number of chunks sent trades accuracy against remote cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

from coinfer.engines.minions import prompts
from coinfer.engines.minions.protocol import ChatCall, Finished, Note, Protocol
from coinfer.errors import ConfigError
from coinfer.retrieval import BM25Retriever, DenseRetriever, Retriever, chunk_documents

__all__ = ["RagConfig", "rag"]


@dataclass(frozen=True, kw_only=True)
class RagConfig:
    """``retriever``: ``bm25`` (words) or ``dense`` (MiniLM embeddings); ``top_k`` chunks of
    ``chunk_chars`` characters go to the remote."""

    name: ClassVar[str] = "rag"
    retriever: Literal["bm25", "dense"] = "bm25"
    top_k: int = 8
    chunk_chars: int = 1000
    max_tokens: int = 256

    def __post_init__(self) -> None:
        if self.retriever not in ("bm25", "dense"):
            raise ConfigError(f"unknown retriever {self.retriever!r}", hint="use bm25 or dense")
        if self.top_k < 1 or self.chunk_chars < 50 or self.max_tokens < 1:
            raise ConfigError(
                f"RAG needs top_k >= 1, chunk_chars >= 50 and max_tokens >= 1, got {self.top_k}, "
                f"{self.chunk_chars}, {self.max_tokens}",
                hint="pass --rag-chunks N with N >= 1",
            )

    def protocol(self, question: str, documents: Sequence[tuple[str, str]]) -> Protocol:
        retriever: Retriever = BM25Retriever() if self.retriever == "bm25" else DenseRetriever()
        return rag(
            question,
            documents,
            retriever,
            top_k=self.top_k,
            chunk_chars=self.chunk_chars,
            max_tokens=self.max_tokens,
        )


def rag(
    question: str,
    documents: Sequence[tuple[str, str]],
    retriever: Retriever,
    *,
    top_k: int = 8,
    chunk_chars: int = 1000,
    max_tokens: int = 256,
) -> Protocol:
    chunks = chunk_documents(documents, chunk_chars, overlap=chunk_chars // 10)
    retriever.index(chunks)
    top = retriever.top(question, top_k)
    yield Note(1, "retrieved", {"chunks": len(chunks), "sent": [f"{c.doc}@{c.start}" for c in top]})
    in_order = sorted(top, key=lambda c: (c.doc, c.start))  # excerpts read best in document order
    request = prompts.rag_request(question, [(c.doc, c.text) for c in in_order], max_tokens)
    [reply] = yield ChatCall("remote", 1, "answer", [request])
    return Finished(reply.text.strip(), 1)
