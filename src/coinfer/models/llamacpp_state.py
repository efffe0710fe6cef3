"""One llama.cpp sequence's cache copied out to host memory and back (``SteerableModel``'s
``save_state`` and ``restore`` on llama.cpp): llama.cpp's per-sequence state, written
straight into the buffer kept and read from it, no copy between. 28 KB a token for
Qwen2.5-1.5B's f16 cache; for 350 tokens about 7 ms out and 1-1.5 ms back on a 2-core
CPU (``docs/bench/serve/one-off/state_copy.txt``), where reading them takes about 2 s.
The logits after a restored cache are those after reading its tokens, to the bit
(``tests/chat/test_local.py``)."""

from __future__ import annotations

import ctypes
from typing import Any

from coinfer.errors import ModelError

__all__ = ["copy_out", "copy_in"]


def copy_out(lc: Any, ctx: Any, seq_id: int, name: str) -> bytearray:
    """Sequence ``seq_id``'s state in context ``ctx`` (``lc``: llama-cpp-python's bindings)."""
    size = lc.llama_state_seq_get_size(ctx, seq_id)
    data = bytearray(size)
    if lc.llama_state_seq_get_data(ctx, _c_bytes(data), size, seq_id) != size:
        raise ModelError(f"llama.cpp could not copy a sequence of {name} out")
    return data


def copy_in(lc: Any, ctx: Any, seq_id: int, data: bytes | bytearray, name: str) -> None:
    """``data`` (``copy_out``'s) written into the cells of sequence ``seq_id``."""
    src = (
        _c_bytes(data) if isinstance(data, bytearray) else (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    )
    if lc.llama_state_seq_set_data(ctx, src, len(data), seq_id) == 0:
        raise ModelError(f"llama.cpp could not restore a saved cache into {name}")


def _c_bytes(buffer: bytearray) -> Any:
    """``buffer`` as a C byte array over the same memory (no copy)."""
    return (ctypes.c_uint8 * len(buffer)).from_buffer(buffer)
