"""The tensor table of a GGUF file, read without parsing its metadata values."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from coinfer.errors import ModelError
from coinfer.models.gguf_layout import forward_order, read_tensor_table
from tests.conftest import needs_llama
from tests.models.gguf_files import write_tiny_gguf


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


# ---- damaged and hostile headers: refused with a ModelError, never a crash ---------------


def _tiny(tmp_path: Path) -> tuple[Path, bytes]:
    path = tmp_path / "tiny.gguf"
    return path, write_tiny_gguf(path)


def test_a_tiny_files_table_is_the_gguf_packages(tmp_path: Path) -> None:
    import gguf

    path, _ = _tiny(tmp_path)
    reference = {t.name: (int(t.data_offset), int(t.n_bytes)) for t in gguf.GGUFReader(path).tensors}
    assert {t.name: (t.offset, t.size) for t in read_tensor_table(path)} == reference


def test_a_file_cut_anywhere_is_refused(tmp_path: Path) -> None:
    path, data = _tiny(tmp_path)
    for end in range(0, len(data) - 1, 7):
        path.write_bytes(data[:end])
        with pytest.raises(ModelError, match="not a"):
            read_tensor_table(path)


def _with_u64(data: bytes, at: int, value: int) -> bytes:
    return data[:at] + struct.pack("<Q", value) + data[at + 8 :]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("n_tensors", 2**63, "tensor descriptions"),  # absurd counts are checked against the bytes left
        ("n_kv", 2**40, "metadata entries"),
        ("tokens_count", 2**62, "array of"),
        ("tensor_offset", 2**40, "outside the file"),
        ("tensor_offset", 4, "alignment"),
        ("n_dims", 9, "dimensions"),
        ("type", 99, "unknown type"),
    ],
)
def test_absurd_header_fields_are_refused(tmp_path: Path, field: str, value: int, message: str) -> None:
    path, data = _tiny(tmp_path)
    at = {
        "n_tensors": 8,
        "n_kv": 16,
        "tokens_count": data.index(b"tokenizer.ggml.tokens") + len("tokenizer.ggml.tokens") + 8,
        "tensor_offset": data.index(b"output_norm.weight") + len("output_norm.weight") + 4 + 8 + 4,
    }
    if field in ("n_dims", "type"):
        name_end = data.index(b"output_norm.weight") + len("output_norm.weight")
        at_dims = name_end if field == "n_dims" else name_end + 4 + 8
        bad = data[:at_dims] + struct.pack("<I", value) + data[at_dims + 4 :]
    else:
        bad = _with_u64(data, at[field], value)
    path.write_bytes(bad)
    with pytest.raises(ModelError, match=message):
        read_tensor_table(path)


def test_an_empty_file_and_a_folder_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelError, match="not a readable GGUF"):
        read_tensor_table(empty)
    with pytest.raises(ModelError, match="cannot read"):
        read_tensor_table(tmp_path)


def test_arrays_nested_without_end_are_refused(tmp_path: Path) -> None:
    key = b"x"
    nested = struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 100_000  # array of array of …
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + nested
    path = tmp_path / "deep.gguf"
    path.write_bytes(data)
    with pytest.raises(ModelError, match="nested"):
        read_tensor_table(path)


@needs_llama
def test_llama_cpp_is_never_given_a_damaged_header(tmp_path: Path, smollm_path: Path) -> None:
    from coinfer.models.llamacpp import LlamaCppModel

    with open(smollm_path, "rb") as f:
        head = f.read(8 << 20)
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(head)  # the header whole, the tensors cut off
    with pytest.raises(ModelError, match="outside the file"):
        LlamaCppModel(bad, n_ctx=64)
