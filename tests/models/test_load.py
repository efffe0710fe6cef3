"""Loading: transformers' GGUF conversion parses the file's metadata once, not once per
thing it builds from it (config, tokenizer, weights)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.models.gguf_files import write_tiny_gguf


def test_within_gguf_read_once_a_file_is_parsed_once_and_the_reader_restored_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gguf = pytest.importorskip("gguf")
    from coinfer.models.load import gguf_read_once

    path, other = tmp_path / "a.gguf", tmp_path / "b.gguf"
    write_tiny_gguf(path)
    write_tiny_gguf(other)
    parsed: list[str] = []
    original = gguf.GGUFReader

    class Counting(original):  # type: ignore[misc,valid-type]
        def __init__(self, p: object, mode: str = "r") -> None:
            parsed.append(str(p))
            super().__init__(p, mode)

    monkeypatch.setattr(gguf, "GGUFReader", Counting)
    with gguf_read_once():
        first, again = gguf.GGUFReader(path), gguf.GGUFReader(str(path))  # as transformers opens it
        assert again is first and first.fields["general.name"].contents() == "tiny"
        assert gguf.GGUFReader(other) is not first
    assert parsed == [str(path), str(other)]
    assert gguf.GGUFReader is Counting  # the module's own reader again
    assert gguf.GGUFReader(path) is not first
