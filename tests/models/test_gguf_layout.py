"""The tensor table of a GGUF file, read without parsing its metadata values."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinfer.errors import ModelError
from coinfer.models.gguf_layout import forward_order, read_tensor_table
from tests.conftest import needs_llama


@needs_llama
def test_the_table_is_the_gguf_packages_and_covers_the_file(smollm_path: Path) -> None:
    import gguf

    table = read_tensor_table(smollm_path)
    reference = {t.name: (int(t.data_offset), int(t.n_bytes)) for t in gguf.GGUFReader(smollm_path).tensors}
    assert {t.name: (t.offset, t.size) for t in table} == reference
    assert max(t.offset + t.size for t in table) == smollm_path.stat().st_size


@needs_llama
def test_a_forward_reads_the_blocks_in_order_then_the_output(smollm_path: Path) -> None:
    order = forward_order(read_tensor_table(smollm_path))
    layers = [int(t.name.split(".")[1]) for t in order if t.name.startswith("blk.")]
    assert layers == sorted(layers) and layers[0] == 0
    # SmolLM2 ties its output to the embeddings: the table is read whole, last
    assert [t.name for t in order[-2:]] == ["output_norm.weight", "token_embd.weight"]


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a model" * 10)
    with pytest.raises(ModelError, match="not a GGUF"):
        read_tensor_table(bad)
