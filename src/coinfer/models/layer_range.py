"""A contiguous range of a transformers causal LM's decoder layers, loaded alone.

``load_layer_range(folder, start, stop)`` builds the model's skeleton without memory
(PyTorch's ``meta`` device), keeps layers ``[start, stop)`` (renumbered from 0 so their
KV cache holds only them), the embedding when ``start`` is 0 and the final norm and head
when ``stop`` is the last layer, and reads from the safetensors files only the tensors
those keep. A device that serves half the layers holds half the weights: what an edge
pipeline needs (paper 004), where the whole model does not fit one device.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coinfer.errors import ConfigError, ModelError
from coinfer.models.windows import layer_types

__all__ = ["keep_layers", "layer_count", "load_layer_range", "materialize_buffers", "skeleton"]


def layer_count(config: Any) -> int:
    return int(config.num_hidden_layers)


def keep_layers(model: Any, start: int, stop: int) -> None:
    """Prune ``model`` (a ``*ForCausalLM``) in place to layers ``[start, stop)``; the
    embedding stays only when ``start == 0``, the norm and the head only at the end."""
    import torch

    inner = model.model
    n_layers = len(inner.layers)
    if not 0 <= start < stop <= n_layers:
        raise ConfigError(f"a layer range needs layers within 0..{n_layers}, got [{start}, {stop})")
    kept = list(inner.layers)[start:stop]
    for i, layer in enumerate(kept):
        layer.self_attn.layer_idx = i
    inner.layers = torch.nn.ModuleList(kept)
    config = model.config
    config.layer_types = layer_types(config)[start:stop]  # named, where transformers inferred them
    config.num_hidden_layers = stop - start
    if start > 0:
        inner.embed_tokens = None
    if stop < n_layers:
        inner.norm = torch.nn.Identity()
        model.lm_head = None


def _tensor_name(name: str, start: int) -> str:
    """The name in the checkpoint of the pruned model's tensor ``name``."""
    prefix = "model.layers."
    if not name.startswith(prefix):
        return name
    index, _, rest = name[len(prefix) :].partition(".")
    return f"{prefix}{int(index) + start}.{rest}"


def _checkpoint_files(folder: Path) -> dict[str, Path]:
    """Every tensor name of the checkpoint in ``folder`` and the file that holds it."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: folder / file for name, file in weight_map.items()}
    single = folder / "model.safetensors"
    if not single.is_file():
        raise ModelError(
            f"{folder} holds no safetensors weights",
            hint="save the model with save_pretrained(safe_serialization=True)",
        )
    return {name: single for name in _safetensors_header(single)[0] if name != "__metadata__"}


def _read_tensors(folder: Path, wanted: dict[str, str], dtype: Any, device: Any = None) -> dict[str, Any]:
    """``{model name: tensor}`` for ``wanted`` (model name → checkpoint name), read from
    disk file by file, each moved to ``device`` (None: kept on the host) as soon as it is
    read, so that the host holds one at a time. A tied head missing from the checkpoint
    reads the embedding."""
    files = _checkpoint_files(folder)
    by_file: dict[Path, list[tuple[str, str]]] = {}
    for name, source in wanted.items():
        if source not in files and source == "lm_head.weight":
            source = "model.embed_tokens.weight"
        if source not in files:
            raise ModelError(f"{folder} lacks the tensor {source}", hint="the checkpoint is incomplete")
        by_file.setdefault(files[source], []).append((name, source))
    out: dict[str, Any] = {}
    for path, names in by_file.items():
        header, start = _safetensors_header(path)
        with open(path, "rb", buffering=0) as f:
            for name, source in names:
                tensor = _read_tensor(f, start, header[source])
                out[name] = tensor.to(device=device, dtype=dtype)
    return out


_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I64": "int64",
           "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}  # fmt: skip


def _safetensors_header(path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's header (name → dtype, shape, byte offsets) and where the data
    starts."""
    with open(path, "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        if size <= 0 or size > 100 << 20:
            raise ModelError(f"{path} is not a safetensors file", hint="re-save or re-download it")
        return json.loads(f.read(size)), 8 + size


def _read_tensor(f: Any, data_start: int, entry: dict[str, Any]) -> Any:
    """One tensor read with ``readinto`` straight into its own memory. A memory map
    (``safe_open``) would keep every page it touched in this process's resident set until
    closed: a device's peak held its weights twice."""
    import torch

    begin, end = (int(v) for v in entry["data_offsets"])
    dtype = _DTYPES.get(str(entry["dtype"]))
    if dtype is None:
        raise ModelError(f"safetensors dtype {entry['dtype']} is not supported here")
    raw = torch.empty(end - begin, dtype=torch.uint8)
    f.seek(data_start + begin)
    view = raw.numpy().data  # a memoryview of bytes
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise ModelError(f"{f.name} ends inside a tensor", hint="the checkpoint is incomplete")
        got += n
    return raw.view(getattr(torch, dtype)).reshape([int(v) for v in entry["shape"]])


def skeleton(config: Any, dtype: Any) -> Any:
    """The ``*ForCausalLM`` of ``config`` with every tensor on the ``meta`` device (no memory)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


def load_layer_range(
    folder: str | Path, start: int, stop: int, *, dtype: Any = None, device: Any = None
) -> tuple[Any, int]:
    """The model in ``folder`` (a transformers checkpoint) holding only layers ``[start,
    stop)`` and what goes with them, in ``dtype`` (float32 by default), in eval mode, its
    weights on ``device`` (by default the host; its computed buffers stay there); and the
    whole model's layer count."""
    import torch
    from transformers import AutoConfig

    folder = Path(folder)
    dtype = dtype or torch.float32
    try:
        config = AutoConfig.from_pretrained(folder)
    except (OSError, ValueError) as exc:
        raise ModelError(f"transformers could not read {folder}/config.json: {exc}") from exc
    model = skeleton(config, dtype)
    n_layers = layer_count(model.config)
    keep_layers(model, start, stop)
    if start > 0 and model.lm_head is not None:  # a tied head no longer shares the embedding
        model.lm_head.weight = torch.nn.Parameter(torch.empty(model.lm_head.weight.shape, device="meta"))
    # every name, a tied head's too (the state dict asks for it), read from the embedding
    names = (name for name, _ in model.named_parameters(remove_duplicate=False))
    wanted = {name: _tensor_name(name, start) for name in names}
    model.load_state_dict(_read_tensors(folder, wanted, dtype, device), strict=True, assign=True)
    embedding = model.model.embed_tokens
    if model.lm_head is not None and embedding is not None and config.tie_word_embeddings:
        model.lm_head.weight = embedding.weight  # one range holds both: tied again, held once
    materialize_buffers(model)
    return model.eval(), n_layers


def materialize_buffers(model: Any) -> None:
    """Buffers (rotary frequencies) are computed, not stored: rebuild the modules that own
    them, now off the ``meta`` device."""
    inner = model.model
    rotary = getattr(inner, "rotary_emb", None)
    if rotary is not None:
        inner.rotary_emb = type(rotary)(config=model.config)
    left = [name for name, b in model.named_buffers() if b.is_meta]
    left += [name for name, p in model.named_parameters() if p.is_meta]
    if left:
        raise ModelError(
            f"could not load {left[:3]} of a layer range", hint="this architecture is not supported"
        )
