"""Fuzzing the GGUF header reader that stands before llama.cpp: a small valid file cut,
overwritten, stretched or given extreme counts is a ``ModelError`` or a table whose every
tensor lies within the file, read within the deadline; never another exception."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinfer.errors import ModelError
from coinfer.models.gguf_layout import read_tensor_table
from tests.fuzzing import within_deadline
from tests.models.gguf_files import write_tiny_gguf

pytestmark = pytest.mark.fuzz

with tempfile.TemporaryDirectory() as _folder:
    TINY = write_tiny_gguf(Path(_folder) / "tiny.gguf")

_EXTREMES = (0, 1, 2**31, 2**32 - 1, 2**32, 2**62, 2**63, 2**64 - 1)
_at = st.integers(0, len(TINY))
mutations = st.one_of(
    st.builds(lambda i: TINY[:i], _at),  # cut
    st.builds(lambda i, b: TINY[:i] + b + TINY[i + len(b) :], _at, st.binary(min_size=1, max_size=8)),
    st.builds(lambda i, b: TINY[:i] + b + TINY[i:], _at, st.binary(min_size=1, max_size=64)),  # stretched
    st.builds(lambda i, v: TINY[:i] + struct.pack("<Q", v) + TINY[i + 8 :], _at, st.sampled_from(_EXTREMES)),
    st.builds(
        lambda i, v: TINY[:i] + struct.pack("<I", v % 2**32) + TINY[i + 4 :], _at, st.sampled_from(_EXTREMES)
    ),
    st.binary(max_size=256).map(lambda b: b"GGUF" + b),
)


@given(mutations)
def test_any_damaged_header_is_refused_or_read_within_the_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "m.gguf"
        path.write_bytes(data)
        try:
            table = within_deadline(lambda: read_tensor_table(path))
        except ModelError as exc:
            assert str(exc)
            return
    assert all(t.offset >= 0 and t.offset + t.size <= len(data) for t in table)
    assert len({t.name for t in table}) == len(table)
