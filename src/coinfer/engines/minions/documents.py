"""Reading the user's documents, with an error that says what to do for each bad file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from coinfer.errors import ConfigError, ContextOverflowError
from coinfer.models.base import SteerableModel

__all__ = ["check_local_window", "load_documents"]

MAX_DOCUMENT_BYTES = 64 << 20


def load_documents(paths: Sequence[str | Path]) -> list[tuple[str, str]]:
    """``(name, text)`` for each file; ``ConfigError`` for a missing, unreadable, empty or
    binary one. Names are the file names (the parent folder is added where two collide)."""
    if not paths:
        raise ConfigError("no document given", hint="pass --doc FILE (several times for several documents)")
    docs = [(Path(p), _read(Path(p))) for p in paths]
    names = [p.name for p, _ in docs]
    return [
        (str(Path(p.parent.name) / p.name) if names.count(p.name) > 1 else p.name, text) for p, text in docs
    ]


def _read(path: Path) -> str:
    if not path.exists():
        raise ConfigError(f"no document at {path}", hint="check the path given to --doc")
    if not path.is_file():
        raise ConfigError(f"{path} is not a file", hint="pass a text file to --doc")
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise ConfigError(
                f"{path} has {size} bytes; at most {MAX_DOCUMENT_BYTES}",
                hint="split it, or pass the part that matters",
            )
        data = path.read_bytes()
    except PermissionError as exc:
        raise ConfigError(
            f"cannot read {path}: permission denied", hint="check the file's permissions"
        ) from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if b"\x00" in data[:8192]:
        raise ConfigError(
            f"{path} looks binary, not text",
            hint="convert it to text first (for example pdftotext for a PDF)",
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path} is not UTF-8 text (byte {exc.start})", hint="convert it to UTF-8 (iconv -t utf-8)"
        ) from exc
    if not text.strip():
        raise ConfigError(f"{path} is empty", hint="pass a document with some text in it")
    return text


def check_local_window(
    model: SteerableModel,
    question: str,
    documents: Sequence[tuple[str, str]],
    protocol: str,
    *,
    room: int = 64,
) -> None:
    """Refuse up front, before any remote token is paid for, work the local model's window
    cannot hold: a question that alone fills it (every local job carries a task of that
    size), or, for the protocols whose local side reads the documents whole (``minion``,
    ``local-only``), documents and question together."""
    window = model.n_ctx - room
    asked = len(model.tokenize(question))
    if asked >= window:
        raise ContextOverflowError(
            f"the question has {asked} tokens and the local model's window holds {model.n_ctx}",
            hint="shorten the question, or raise --local-ctx",
        )
    if protocol not in ("minion", "local-only"):
        return
    whole = asked + sum(len(model.tokenize(text)) for _, text in documents)
    if whole >= window:
        raise ContextOverflowError(
            f"the documents and question have {whole} tokens and the local model's window holds "
            f"{model.n_ctx}; {protocol} gives the local model the documents whole",
            hint="use --protocol minions (it reads the documents in chunks), or raise --local-ctx",
        )
