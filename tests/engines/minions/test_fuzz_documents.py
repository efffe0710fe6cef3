"""Fuzzing what reads the user's documents: any file's bytes are a document's text or a
``ConfigError`` that says why; the chunkers a job's code calls split any text (NULs,
huge lines, runs of backticks, headings, form feeds) into non-blank pieces of it, within
the deadline."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinfer.engines.minions.documents import load_documents
from coinfer.engines.minions.job_api import (
    chunk_by_chars,
    chunk_by_code_blocks,
    chunk_by_pages,
    chunk_by_paragraphs,
    chunk_by_sections,
)
from coinfer.errors import ConfigError
from tests.fuzzing import hostile_text, within_deadline

pytestmark = pytest.mark.fuzz

_MARKS = ("```", "```py\n", "\n", "\n\n", "# ", "\n===\n", "\f", "def f():\n", "@d\n", "  \t", "`")
documents = st.one_of(
    hostile_text,
    st.lists(st.sampled_from(_MARKS) | st.text(max_size=20), max_size=200).map("".join),
    st.builds(lambda mark, n: mark * n, st.sampled_from(_MARKS), st.integers(1, 100_000)),
)


@given(st.binary(max_size=4096) | documents.map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_any_file_is_a_document_or_a_clear_refusal(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "doc.txt"
        path.write_bytes(data)
        try:
            [(name, text)] = within_deadline(lambda: load_documents([path]))
        except ConfigError as exc:
            assert str(exc).startswith(("no document", str(path)))  # names the file
            return
    assert name == "doc.txt" and text.strip() and text == data.decode("utf-8-sig")


def _ink(text: str) -> str:
    """The text without its whitespace: what a chunker must neither lose nor invent."""
    return "".join(text.split())


@pytest.mark.parametrize(
    "chunker",
    [chunk_by_chars, chunk_by_paragraphs, chunk_by_pages, chunk_by_code_blocks, chunk_by_sections],
)
@given(text=documents, size=st.integers(1, 5000))
def test_every_chunker_splits_any_text_into_pieces_of_it(chunker, text: str, size: int) -> None:  # type: ignore[no-untyped-def]
    if chunker is chunk_by_pages:
        pieces = within_deadline(lambda: chunker(text, page_chars=size))
    else:
        pieces = within_deadline(lambda: chunker(text, size))
    if chunker is chunk_by_chars:
        assert "".join(pieces) == text
        return
    assert all(piece.strip() for piece in pieces)  # no blank job
    if chunker is not chunk_by_pages:
        assert all(len(piece) <= size for piece in pieces)
    if chunker is chunk_by_code_blocks and "```" in text:  # only the fenced blocks are kept
        assert all(word in text for piece in pieces for word in piece.split())
    else:
        assert _ink("".join(pieces)) == _ink(text)
