"""Writing benchmark results: JSON, Markdown, and the machine they were measured on."""

from __future__ import annotations

import json
import os
import platform
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["environment", "pyplot", "write_json", "write_markdown"]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """Where and with what a benchmark ran, so that figures can be compared honestly."""
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "coinfer": _version("coinfer"),
        "llama_cpp_python": _version("llama-cpp-python"),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
    }


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_markdown(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def pyplot() -> Any:
    """matplotlib's pyplot drawing to files, or None when matplotlib (the ``bench`` extra)
    is not installed: the plots are then left out."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
