"""A transformers sequence's cache copied out to host memory and back (``save_state`` and
``restore`` on both transformers backends), as llama.cpp's per-sequence state is
(``llamacpp_state``).

The copy is the layers' keys and values in safetensors' format: a header of names, dtypes
and shapes, then the raw tensors, nothing that runs code when read (no pickle). It holds
the values the forward wrote, in their dtype, so the logits after a restored cache are
those after reading its tokens, to the bit. A GPU's cache comes to host memory and goes
back to the GPU, as llama-server's ``--cache-ram`` keeps its slots' prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coinfer.errors import ModelError

__all__ = ["pack_layers", "unpack_layers"]


def pack_layers(keys: Sequence[Any], values: Sequence[Any]) -> bytes:
    """Layer ``i``'s ``keys[i]`` and ``values[i]`` (torch tensors, any device) as one
    safetensors blob in host memory."""
    from safetensors.torch import save

    tensors: dict[str, Any] = {}
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        tensors[f"k{i}"] = k.detach().to("cpu").contiguous()
        tensors[f"v{i}"] = v.detach().to("cpu").contiguous()
    return save(tensors)


def unpack_layers(data: bytes | bytearray, device: Any, *, name: str) -> tuple[list[Any], list[Any]]:
    """``pack_layers``' keys and values, on ``device``; ``ModelError`` naming the model
    ``name`` where the blob is not one."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        tensors = load(bytes(data))
    except SafetensorError as exc:
        raise ModelError(f"{name} cannot restore a saved cache: {exc}") from exc
    layers = len(tensors) // 2
    if set(tensors) != {f"{kind}{i}" for kind in "kv" for i in range(layers)}:
        raise ModelError(f"{name} cannot restore a saved cache: its layers are not keys and values")
    keys = [tensors[f"k{i}"].to(device) for i in range(layers)]
    values = [tensors[f"v{i}"].to(device) for i in range(layers)]
    return keys, values
