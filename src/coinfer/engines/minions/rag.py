"""The RAG baseline of paper 000 (§6.5): retrieve the chunks nearest the question locally
and send only those, with the question, to the remote model.

The paper's RAG used chunks of 1000 characters (its best on FinanceBench) and BM25 or
embeddings; the number of chunks sent trades accuracy against remote cost.
"""

from __future__ import annotations

from collections.abc import Sequence

from coinfer.engines.minions import prompts
from coinfer.engines.minions.protocol import ChatCall, Finished, Note, Protocol
from coinfer.retrieval import Retriever, chunk_documents

__all__ = ["rag"]


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
