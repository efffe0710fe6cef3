"""What a model spec names: a catalogue model, a GGUF file, a model directory or a Hub id."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from coinfer import catalog
from coinfer.errors import ModelError, UnknownModelError

__all__ = ["ModelSource", "resolve"]

Kind = Literal["catalog", "gguf", "hf_dir", "hub"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(:[\w.-]+\.gguf)?$")
_GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class ModelSource:
    """A resolved spec. ``path`` is the file or directory for local kinds."""

    kind: Kind
    spec: str
    path: Path | None = None

    @property
    def name(self) -> str:
        if self.kind in ("catalog", "hub"):
            return self.spec
        return self.local_path.stem if self.kind == "gguf" else self.local_path.name

    @property
    def local_path(self) -> Path:
        """The file or directory of a local spec (a GGUF file or a model directory)."""
        if self.path is None:
            raise ModelError(f"{self.spec} names a {self.kind} model, not a local file or directory")
        return self.path

    @property
    def catalog_model(self) -> catalog.CatalogModel | None:
        return catalog.CATALOG.get(self.spec) if self.kind == "catalog" else None


def _is_gguf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == _GGUF_MAGIC
    except OSError:
        return False


def resolve(spec: str) -> ModelSource:
    """Classify ``spec``; an unknown spec lists the catalogue names."""
    if spec in catalog.CATALOG:
        return ModelSource("catalog", spec)
    if not spec.strip():
        raise UnknownModelError("the model name is empty", hint=f"known models: {', '.join(catalog.CATALOG)}")
    path = Path(spec).expanduser()
    if path.is_file():
        if not _is_gguf(path):
            raise ModelError(
                f"{path} is not a GGUF file",
                hint="pass a .gguf file, a Hugging Face model directory or a catalogue name",
            )
        return ModelSource("gguf", spec, path.resolve())
    if path.is_dir():
        if (path / "config.json").is_file():
            return ModelSource("hf_dir", spec, path.resolve())
        ggufs = sorted(p for p in path.glob("*.gguf") if _is_gguf(p))
        if len(ggufs) == 1:
            return ModelSource("gguf", spec, ggufs[0].resolve())
        raise ModelError(
            f"{path} is a directory without config.json"
            + (f" and with {len(ggufs)} GGUF files" if ggufs else ""),
            hint="pass the .gguf file itself, or a directory saved by transformers' save_pretrained",
        )
    if _HUB_ID.match(spec) and not spec.startswith(("./", "../")):
        return ModelSource("hub", spec)
    raise UnknownModelError(
        f"unknown model {spec!r}: not a catalogue name, an existing file or directory, or a Hub id",
        hint=f"known models: {', '.join(catalog.CATALOG)} (coinfer models list)",
    )
