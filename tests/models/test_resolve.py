"""``coinfer.models.resolve``: what a model spec names; and how ``load_model`` refuses bad specs.

Relative specs are resolved in an empty working directory so that nothing in the checkout
can be mistaken for a model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coinfer import catalog
from coinfer.errors import ConfigError, ModelError, UnknownModelError
from coinfer.models import load_model
from coinfer.models.resolve import resolve
from tests.conftest import needs_torch

GGUF_HEADER = b"GGUF" + bytes(28)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random transformers model directory (config.json, weights, tokenizer)."""
    from coinfer.testing import tiny_hf_model_dir

    return tiny_hf_model_dir(tmp_path_factory.mktemp("tiny") / "m")


@pytest.fixture
def empty_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


# ---- resolve ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(catalog.CATALOG))
def test_catalogue_name(name: str, empty_cwd: Path) -> None:
    source = resolve(name)
    assert source.kind == "catalog"
    assert source.name == name
    assert source.path is None
    assert source.catalog_model is catalog.CATALOG[name]


def test_gguf_file(smollm_path: Path) -> None:
    source = resolve(str(smollm_path))
    assert source.kind == "gguf"
    assert source.path == smollm_path.resolve()
    assert source.name == smollm_path.stem
    assert source.catalog_model is None


def test_relative_gguf_file(empty_cwd: Path) -> None:
    _write(empty_cwd / "sub" / "tiny.gguf", GGUF_HEADER)
    source = resolve("sub/tiny.gguf")  # also a valid Hub id: the existing file wins
    assert source.kind == "gguf"
    assert source.path == (empty_cwd / "sub" / "tiny.gguf").resolve()
    assert source.name == "tiny"


@needs_torch
def test_hf_directory(tiny_dir: Path) -> None:
    source = resolve(str(tiny_dir))
    assert source.kind == "hf_dir"
    assert source.path == tiny_dir.resolve()
    assert source.name == "m"
    assert source.catalog_model is None


def test_directory_with_one_gguf_is_that_file(tmp_path: Path) -> None:
    gguf = _write(tmp_path / "d" / "model.gguf", GGUF_HEADER)
    _write(tmp_path / "d" / "notes.gguf", b"not a gguf at all")  # named .gguf, but no magic
    _write(tmp_path / "d" / "README.md", b"# hi")
    source = resolve(str(tmp_path / "d"))
    assert source.kind == "gguf"
    assert source.path == gguf.resolve()
    assert source.name == "model"


def test_directory_with_two_ggufs_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "d" / "a.gguf", GGUF_HEADER)
    _write(tmp_path / "d" / "b.gguf", GGUF_HEADER)
    with pytest.raises(ModelError, match="2 GGUF files") as info:
        resolve(str(tmp_path / "d"))
    assert not isinstance(info.value, UnknownModelError)
    assert info.value.hint is not None and ".gguf" in info.value.hint


def test_directory_without_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(ModelError, match="without config.json"):
        resolve(str(tmp_path / "d"))


def test_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "model.gguf", b"PK\x03\x04 a zip, not a gguf")
    with pytest.raises(ModelError, match="not a GGUF file") as info:
        resolve(str(path))
    assert not isinstance(info.value, UnknownModelError)
    assert info.value.hint is not None


def test_empty_file_is_not_gguf(tmp_path: Path) -> None:
    path = _write(tmp_path / "empty.gguf", b"")
    with pytest.raises(ModelError, match="not a GGUF file"):
        resolve(str(path))


@pytest.mark.parametrize("spec", ["someorg/somemodel", "some-org/some.model_1", "org/repo:model-Q4_K_M.gguf"])
def test_hub_id(spec: str, empty_cwd: Path) -> None:
    source = resolve(spec)
    assert source.kind == "hub"
    assert source.path is None
    assert source.name == spec
    assert source.catalog_model is None


@pytest.mark.parametrize("spec", ["not-a-model", "./org/repo", "a/b/c", "/no/such/file.gguf"])
def test_unknown_spec_lists_catalogue(spec: str, empty_cwd: Path) -> None:
    with pytest.raises(UnknownModelError) as info:
        resolve(spec)
    assert info.value.hint is not None
    for name in catalog.CATALOG:
        assert name in info.value.hint


def test_empty_spec_is_unknown(empty_cwd: Path) -> None:
    (empty_cwd / "config.json").write_text("{}")
    with pytest.raises(UnknownModelError):
        resolve("")


# ---- load_model error paths ---------------------------------------------------------


def test_unknown_backend_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="nope") as info:
        load_model("x", backend="nope")
    assert info.value.hint is not None and "llama.cpp" in info.value.hint


def test_unknown_spec_on_load(empty_cwd: Path) -> None:
    with pytest.raises(UnknownModelError):
        load_model("not-a-model", backend="llama.cpp")


@needs_torch
def test_hf_directory_on_llama_cpp_points_to_transformers(tiny_dir: Path) -> None:
    with pytest.raises(ModelError, match="GGUF") as info:
        load_model(str(tiny_dir), backend="llama.cpp")
    assert info.value.hint is not None
    assert "--backend transformers" in info.value.hint


@needs_torch
def test_unreachable_hub_model_is_a_model_error() -> None:
    # Offline this fails in ~1 s (name resolution); online the repository does not exist.
    with pytest.raises(ModelError) as info:
        load_model("coinfer-test-org/no-such-model", backend="transformers")
    assert "coinfer-test-org/no-such-model" in str(info.value)
    assert "Hugging Face Hub" in str(info.value)
    assert info.value.hint is not None and "local path" in info.value.hint
