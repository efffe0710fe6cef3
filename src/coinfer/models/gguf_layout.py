"""Where a GGUF file keeps each tensor, and the order a forward pass reads them in.

``gguf.GGUFReader`` builds a numpy view of every metadata value: on a Qwen2.5 file (151k
vocabulary strings) it takes 6 s. The prefetcher needs only the tensor table, so this
reads the header with ``struct``, skipping the metadata values by their lengths, and
takes the quantisation block sizes from the ``gguf`` package.

The same reader checks a file before llama.cpp opens it (``check_gguf``): every count,
length and offset is bounded by the bytes the file has, so a truncated or hostile header
is a ``ModelError`` that names what is wrong, never a crash inside llama.cpp or a loop
over a count the file cannot hold.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from coinfer.errors import ModelError

__all__ = ["TensorSpan", "check_gguf", "forward_order", "layer_of", "output_rows", "read_tensor_table"]

_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # type -> bytes
_STRING, _ARRAY = 8, 9
_LAYER = re.compile(r"^blk\.(\d+)\.")
_VERSIONS = (2, 3)  # what llama.cpp reads
MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_DEPTH = 4  # arrays within arrays
_LENGTH = struct.Struct("<Q")
_HINT = "the file is damaged or not a model: download it again, or pass another .gguf file"


@dataclass(frozen=True)
class TensorSpan:
    """A tensor's bytes in the file: [offset, offset + size); its GGML type and dims
    (innermost first, as GGUF writes them)."""

    name: str
    offset: int
    size: int
    kind: int = 0
    dims: tuple[int, ...] = ()


class _Cursor:
    """Reads little-endian values from the mapped file, never past its end."""

    def __init__(self, buf: mmap.mmap, path: str | Path) -> None:
        self.buf, self.at, self.path = buf, 0, path

    @property
    def left(self) -> int:
        return len(self.buf) - self.at

    def bad(self, what: str) -> ModelError:
        return ModelError(f"{self.path} is not a readable GGUF file: {what} (at byte {self.at})", hint=_HINT)

    def need(self, n: int, what: str) -> None:
        if n > self.left:
            raise self.bad(f"{what}: {n} bytes needed, {self.left} left")

    def take(self, fmt: str, what: str = "a value") -> tuple[int, ...]:
        size = struct.calcsize(fmt)
        self.need(size, what)
        values = struct.unpack_from(fmt, self.buf, self.at)
        self.at += size
        return values

    def string(self, what: str = "a string") -> str:
        (n,) = self.take("<Q", what)
        self.need(n, what)
        text = self.buf[self.at : self.at + n].decode("utf-8", "replace")
        self.at += n
        return text

    def skip_value(self, kind: int, depth: int = 0) -> None:
        if kind in _SCALARS:
            self.need(_SCALARS[kind], "a metadata value")
            self.at += _SCALARS[kind]
        elif kind == _STRING:
            (n,) = self.take("<Q", "a metadata string")
            self.need(n, "a metadata string")
            self.at += n
        elif kind == _ARRAY:
            self._skip_array(depth)
        else:
            raise self.bad(f"unknown metadata type {kind}")

    def _skip_array(self, depth: int) -> None:
        if depth >= _MAX_DEPTH:
            raise self.bad(f"metadata arrays nested over {_MAX_DEPTH} deep")
        inner, count = self.take("<IQ", "a metadata array")
        if inner in _SCALARS:
            self.need(_SCALARS[inner] * count, f"an array of {count} values")
            self.at += _SCALARS[inner] * count
            return
        if inner not in (_STRING, _ARRAY):
            raise self.bad(f"unknown metadata type {inner}")
        self.need(8 * count, f"an array of {count} strings or arrays")  # each at least its length
        if inner == _STRING:
            self._skip_strings(count)
            return
        for _ in range(count):
            self.skip_value(inner, depth + 1)

    def _skip_strings(self, count: int) -> None:
        """A vocabulary's worth of strings (151k in Qwen2.5's), in one tight loop."""
        buf, at, end, length = self.buf, self.at, len(self.buf), _LENGTH.unpack_from
        for _ in range(count):
            if at + 8 > end:
                at = end + 1
                break
            at += 8 + length(buf, at)[0]
        if at > end:
            raise self.bad(f"an array of {count} strings runs past the end of the file")
        self.at = at


def read_tensor_table(path: str | Path) -> list[TensorSpan]:
    """Every tensor of the GGUF file at ``path`` with its absolute offset and size, each
    checked to lie within the file."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(buf, path)
            alignment, infos = _read_header(cur)
            data_start = -(-cur.at // alignment) * alignment
            size = len(buf)
    except ValueError as exc:  # mmap of an empty file
        raise ModelError(f"{path} is not a readable GGUF file: {exc}", hint=_HINT) from exc
    except OSError as exc:
        raise ModelError(f"cannot read {path}: {exc.strerror or exc}") from exc
    spans = []
    for name, offset, nbytes, kind, dims in infos:
        if offset % alignment or data_start + offset + nbytes > size:
            raise ModelError(
                f"{path} is not a readable GGUF file: tensor {name!r} lies outside the file "
                f"or off its {alignment}-byte alignment",
                hint=_HINT,
            )
        spans.append(TensorSpan(name, data_start + offset, nbytes, kind, dims))
    return spans


def check_gguf(path: str | Path) -> None:
    """Refuse a GGUF file whose header llama.cpp should not be given (``ModelError``)."""
    read_tensor_table(path)


def _read_header(cur: _Cursor) -> tuple[int, list[tuple[str, int, int, int, tuple[int, ...]]]]:
    """The data alignment and each tensor's (name, offset in the data, bytes, type, dims)."""
    magic, version, n_tensors, n_kv = cur.take("<4sIQQ", "the header")
    if magic != b"GGUF" or version not in _VERSIONS:
        raise ModelError(f"{cur.path} is not a GGUF v2 or v3 file", hint="pass a .gguf model file")
    cur.need(12 * n_kv, f"{n_kv} metadata entries")  # a key's length and a type, at least
    alignment = 32
    for _ in range(n_kv):
        key = cur.string("a metadata key")
        (kind,) = cur.take("<I", "a metadata type")
        if key == "general.alignment" and kind == 4:
            (alignment,) = cur.take("<I", "the alignment")
            if alignment <= 0 or alignment & (alignment - 1):
                raise cur.bad(f"alignment {alignment} is not a power of two")
        else:
            cur.skip_value(kind)
    cur.need(32 * n_tensors, f"{n_tensors} tensor descriptions")  # name length, dims, type, offset
    infos, names = [], set()
    for _ in range(n_tensors):
        infos.append(_tensor_info(cur))
        if infos[-1][0] in names:
            raise cur.bad(f"tensor {infos[-1][0]!r} is described twice")
        names.add(infos[-1][0])
    return alignment, infos


def _tensor_info(cur: _Cursor) -> tuple[str, int, int, int, tuple[int, ...]]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    name = cur.string("a tensor name")
    (n_dims,) = cur.take("<I", "a tensor's dimension count")
    if not 1 <= n_dims <= MAX_DIMS:
        raise cur.bad(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    dims = cur.take(f"<{n_dims}Q", "a tensor's dimensions")
    kind, offset = cur.take("<IQ", "a tensor's type and offset")
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
    except (ValueError, KeyError):
        raise cur.bad(f"tensor {name!r} has an unknown type {kind}") from None
    elements = 1
    for d in dims:
        elements *= d
    if min(dims) < 1 or dims[0] % block:
        raise cur.bad(
            f"tensor {name!r} has dimensions {list(dims)} that its type's blocks of {block} do not fit"
        )
    return name, offset, elements // block * type_size, kind, tuple(dims)


def output_rows(path: str | Path, rows: Sequence[int] | np.ndarray) -> np.ndarray:
    """The output projection's rows for the token ids ``rows`` (the token embeddings'
    where the output is tied to them), dequantized: (len(rows), hidden) float32."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
    from gguf.quants import dequantize

    by_name = {t.name: t for t in read_tensor_table(path)}
    table = by_name.get("output.weight") or by_name.get("token_embd.weight")
    if table is None or len(table.dims) != 2:
        raise ModelError(f"{path} has no output projection", hint="pass a language model's GGUF file")
    kind = GGMLQuantizationType(table.kind)
    block, type_size = GGML_QUANT_SIZES[kind]
    width, vocab = table.dims
    ids = np.asarray(rows, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise ModelError(f"token ids outside {path}'s vocabulary of {vocab}")
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        raw = np.frombuffer(buf, dtype=np.uint8, count=table.size, offset=table.offset)
        picked = raw.reshape(vocab, width // block * type_size)[ids].copy()
        del raw  # the map closes only once no array views it
    return np.asarray(dequantize(picked, kind), dtype=np.float32).reshape(len(ids), width)


def layer_of(name: str) -> int | None:
    """The block a tensor belongs to (``blk.N.…``), or None (embeddings, output)."""
    m = _LAYER.match(name)
    return None if m is None else int(m.group(1))


def forward_order(tensors: list[TensorSpan]) -> list[TensorSpan]:
    """The tensors in the order a forward pass reads them whole: the blocks layer by layer,
    then the output norm and the output projection (the token embeddings when the output
    is tied to them). The embedding table itself is read a few rows at a time, so it is
    left to the page faults."""
    layers = sorted(
        (t for t in tensors if layer_of(t.name) is not None),
        key=lambda t: (layer_of(t.name), t.offset),
    )
    by_name = {t.name: t for t in tensors}
    tail = [by_name[n] for n in ("output_norm.weight",) if n in by_name]
    output = by_name.get("output.weight") or by_name.get("token_embd.weight")
    return [*layers, *tail, *([output] if output else [])]
