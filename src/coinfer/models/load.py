"""``load_model(spec, backend=...)``: from any model spec to a steerable model.

llama.cpp loads GGUF files (catalogue models are assembled first). transformers loads a
model directory, a Hub id, or a GGUF file, which it de-quantizes once into
``<cache>/hf/<key>`` (safetensors) so that later loads are fast.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from coinfer import catalog
from coinfer.errors import ConfigError, MissingDependencyError, ModelError
from coinfer.models.base import SteerableModel
from coinfer.models.resolve import ModelSource, resolve

__all__ = [
    "BACKENDS",
    "DTYPES",
    "check_backend",
    "dtype_on",
    "gguf_path",
    "hf_cache_key",
    "load_model",
    "transformers_folder",
    "wrap_transformers",
]

Backend = Literal["llama.cpp", "transformers"]
BACKENDS: tuple[str, ...] = ("llama.cpp", "transformers")
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")  # a transformers model's, by torch's names
_GGUF_READS = threading.Lock()  # ``gguf_read_once`` swaps gguf-py's reader process-wide


def load_model(
    spec: str,
    *,
    backend: str = "llama.cpp",
    n_ctx: int = 4096,
    n_threads: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    kv: str | None = None,
    **options: Any,
) -> SteerableModel:
    """Load ``spec`` (catalogue name, .gguf path, model directory or Hub id) on ``backend``.

    ``kv`` (transformers): "static" caches with CUDA graphs (``HFStaticModel``), "dynamic"
    ones, or None for static on a GPU where the architecture allows; ``n_seq_max`` among
    ``options`` is how many sequences may be live (llama.cpp's own; static caches hold
    that many, or else grow as sequences are made)."""
    check_backend(backend, dtype)
    source = resolve(spec)
    if backend == "llama.cpp":
        from coinfer.models.llamacpp import LlamaCppModel

        return LlamaCppModel(gguf_path(source), name=source.name, n_ctx=n_ctx, n_threads=n_threads, **options)
    slots = int(options["n_seq_max"]) if options.get("n_seq_max") else None
    model, tok = _load_transformers(source, n_threads=n_threads, device=device, dtype=dtype)
    return wrap_transformers(model, tok, name=source.name, n_ctx=n_ctx, kv=kv, slots=slots)


def check_backend(backend: str, dtype: str | None = None) -> None:
    """Refuse an unknown backend, or a dtype for llama.cpp (a GGUF file fixes its types)."""
    if backend not in BACKENDS:
        raise ConfigError(f"unknown backend {backend!r}", hint=f"choose one of {', '.join(BACKENDS)}")
    if backend == "llama.cpp" and dtype is not None:
        raise ConfigError(
            f"a dtype ({dtype}) applies to the transformers backend; a GGUF file fixes its own types",
            hint="pass --backend transformers, or leave --dtype out",
        )


def wrap_transformers(
    model: Any,
    tokenizer: Any,
    *,
    name: str,
    n_ctx: int | None,
    kv: str | None = None,
    slots: int | None = None,
) -> SteerableModel:
    """A loaded transformers model and tokenizer behind the steerable contract, on static
    or dynamic KV caches (``load_model``'s ``kv``)."""
    from coinfer.models.hf import HFModel
    from coinfer.models.hf_static import HFStaticModel, static_unsupported

    if kv not in (None, "static", "dynamic"):
        raise ConfigError(f"unknown KV cache kind {kv!r}", hint="use static or dynamic")
    on_gpu = next(model.parameters()).device.type == "cuda"
    if kv == "static" or (kv is None and on_gpu and static_unsupported(model) is None):
        return HFStaticModel(model, tokenizer, name=name, n_ctx=n_ctx, slots=slots)
    return HFModel(model, tokenizer, name=name, n_ctx=n_ctx)


def budget_load_options(role: str) -> dict[str, Any]:
    """llama.cpp options for a model run under a memory budget. The target (``role``
    "target") is memory-mapped with its weights unrepacked (a repacked copy would be
    resident), so the OS pages them in and out; a draft is read into resident memory.
    Both get small batches and few sequence slots (llama.cpp's compute and output buffers
    grow with them, and every MiB they hold is a MiB less for the target's pages): a
    target batch holds a verified tree of up to 63 tokens. The target reports the layers
    its forwards finish, which a ``WeightPrefetcher`` follows."""
    if role == "target":
        return {
            "use_mmap": True,
            "extra_buffers": False,
            "n_batch": 64,
            "n_seq_max": 16,
            "layer_progress": True,
        }
    return {"use_mmap": False, "n_batch": 16, "n_seq_max": 16}


def gguf_path(source: ModelSource) -> Path:
    """The GGUF file behind ``source`` (assembling or downloading it if needed)."""
    if source.kind == "catalog":
        return catalog.prepare(source.spec)
    if source.kind == "gguf":
        return source.local_path
    if source.kind == "hub":
        repo, _, filename = source.spec.partition(":")
        folder = hub_snapshot(repo, allow_patterns=[filename or "*.gguf"])
        found = sorted(folder.rglob(filename or "*.gguf"))
        if len(found) != 1:
            raise ModelError(
                f"{repo} holds {len(found)} GGUF files",
                hint=f"name one: {repo}:FILE.gguf",
            )
        return found[0]
    raise ModelError(
        f"llama.cpp needs a GGUF file and {source.spec} is a transformers model directory",
        hint="use --backend transformers, or convert it with llama.cpp's convert_hf_to_gguf.py",
    )


def hub_snapshot(repo_id: str, *, allow_patterns: list[str] | None = None) -> Path:
    """Download (or find in the local Hub cache) a repository's files."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:
        raise MissingDependencyError("huggingface_hub", "torch") from exc
    try:
        return Path(snapshot_download(repo_id, allow_patterns=allow_patterns))
    except Exception as exc:  # every Hub failure is one user-facing condition
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(
            f"could not fetch {repo_id!r} from the Hugging Face Hub ({type(exc).__name__}: {reason[:200]})",
            hint="if this machine cannot reach the Hub, download the model elsewhere and pass its "
            "local path (a .gguf file or a model directory)",
        ) from exc


# ---- transformers ---------------------------------------------------------------------


def _load_transformers(
    source: ModelSource, *, n_threads: int | None, device: str | None, dtype: str | None
) -> tuple[Any, Any]:
    from coinfer.models.hf import import_torch

    torch = import_torch()
    if n_threads:
        torch.set_num_threads(n_threads)
    dev = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch_dtype = dtype_on(torch, dtype, dev)
    folder = transformers_folder(source.spec)
    return _from_pretrained(folder, torch_dtype, dev)


def transformers_folder(spec: str) -> Path:
    """The transformers checkpoint directory of ``spec``: the directory itself, the Hub
    snapshot, or a GGUF file de-quantized once into the cache."""
    source = resolve(spec)
    if source.kind == "hf_dir":
        return source.local_path
    if source.kind == "hub" and ":" not in source.spec:
        return hub_snapshot(source.spec)
    gguf = gguf_path(source)
    return convert_gguf(gguf, hf_cache_key(source, gguf))


def dtype_on(torch: Any, dtype: str | None, device: str) -> Any:
    """The torch dtype named ``dtype``, or by default float32 on the CPU and bfloat16 on a GPU."""
    if dtype is None:
        return torch.float32 if device == "cpu" else torch.bfloat16
    if dtype not in DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}", hint=f"use {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def _from_pretrained(folder: Path, torch_dtype: Any, device: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # stderr carries coinfer's own summary line
    try:
        tok = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelError(f"transformers could not load {folder}: {exc}") from exc
    return model.to(device), tok  # type: ignore[arg-type]  # transformers' stub wants a model


def hf_cache_key(source: ModelSource, path: Path) -> str:
    """A cache folder name for the converted weights of ``source``'s GGUF file at ``path``:
    the catalogue's content hash, or else the file's identity (path, size, mtime)."""
    entry = source.catalog_model
    if entry is not None:
        return f"{entry.name}-{entry.sha256[:12]}"
    st = path.stat()
    ident = f"{path}:{st.st_size}:{st.st_mtime_ns}".encode()
    return f"{path.stem}-{hashlib.sha256(ident).hexdigest()[:12]}"


def _detach_gguf_quantizer(model: Any) -> None:
    """Mark a de-quantized GGUF model as a plain one so that ``save_pretrained`` writes it.

    Without the optional GGUF matmul kernels transformers de-quantizes every weight to a
    plain tensor, yet keeps its GGUF quantizer attached, which refuses to serialize.
    """
    import torch

    packed = [n for n, m in model.named_modules() if type(m).__name__.startswith("Gguf")]
    if packed:
        raise ModelError(
            f"transformers kept {len(packed)} GGUF layers packed; coinfer caches de-quantized weights only",
            hint="uninstall the `kernels` package or use --backend llama.cpp",
        )
    model.hf_quantizer = None
    for obj in (model, model.config):
        if hasattr(obj, "quantization_config"):
            delattr(obj, "quantization_config")
    model.is_quantized = False
    odd = {str(p.dtype) for p in model.parameters()} - {
        str(torch.float32),
        str(torch.float16),
        str(torch.bfloat16),
    }
    if odd:
        raise ModelError(
            f"transformers de-quantized the GGUF into {sorted(odd)} weights, which coinfer cannot cache",
            hint="use --backend llama.cpp",
        )


@contextmanager
def gguf_read_once() -> Iterator[None]:
    """transformers opens a GGUF with gguf-py's ``GGUFReader`` three times, for the
    config, the tokenizer and the weights, and each parses every metadata field (a
    150k-token vocabulary: about 9 s on a 2-core CPU). Within this block a file is parsed
    once and its reader (read-only, over a memory map) handed to each. One block at a time
    in a process (``_GGUF_READS``): two converting at once would restore each other's
    stand-in, not gguf-py's reader."""
    import gguf

    with _GGUF_READS:
        original = gguf.GGUFReader
        readers: dict[tuple[str, str], Any] = {}

        def read_once(path: Any, mode: Any = "r") -> Any:
            key = (os.fspath(path), mode)
            if key not in readers:
                readers[key] = original(path, mode)
            return readers[key]

        gguf.GGUFReader = read_once  # type: ignore[assignment,misc]
        try:
            yield
        finally:
            gguf.GGUFReader = original  # type: ignore[misc]


def convert_gguf(gguf: Path, key: str) -> Path:
    """De-quantize ``gguf`` with transformers once; return the saved model directory."""
    target = catalog.cache_dir() / "hf" / key
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with catalog.file_lock(target):
        if (target / "config.json").is_file():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            with gguf_read_once():
                tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
                model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise ModelError(
                f"transformers could not read {gguf.name}: {exc}",
                hint="this architecture or quantization may not be supported by transformers' GGUF "
                "loader; use --backend llama.cpp",
            ) from exc
        _detach_gguf_quantizer(model)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=key + ".", suffix=".tmp"))
        try:
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target
