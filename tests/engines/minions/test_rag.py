"""The RAG baseline sends the retrieved excerpts, not the document."""

from __future__ import annotations

from coinfer.engines.minions import drive, rag
from coinfer.retrieval import BM25Retriever
from coinfer.testing import ScriptedChat

FILLER = "\n".join(f"Line {i} is filler text of the manual, about nothing." for i in range(200))
DOC = FILLER + "\nThe listener binds to port 8731 by default.\n" + FILLER


def test_only_the_top_chunks_reach_the_remote() -> None:
    remote = ScriptedChat(lambda r: "8731")
    run = drive(
        "rag",
        rag("Which port does the listener bind to?", [("manual", DOC)], BM25Retriever(), top_k=2),
        local=None,
        remote=remote,
    )
    assert run.finished.answer == "8731"
    prompt = remote.requests[0].messages[0]["content"]
    assert "port 8731" in prompt and len(prompt) < 2600 < len(DOC)
    sent = next(e for e in run.trace if e["event"] == "retrieved")["data"]["sent"]
    assert len(sent) == 2
