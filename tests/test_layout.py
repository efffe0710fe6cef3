"""The house rules the code is held to (ARCHITECTURE.md, STYLE.md), checked on every run:
small files and functions, and no module's private names used from outside it. The layer
order and the independence of engines are import-linter's contracts (``make test``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from coinfer.chat import python_text

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted((ROOT / "src" / "coinfer").rglob("*.py"))
EVERY = SOURCES + sorted((ROOT / "tests").rglob("*.py"))


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT / "src" if ROOT / "src" in path.parents else ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_files_stay_under_600_lines_and_functions_under_60(path: Path) -> None:
    text = path.read_text()
    assert len(text.splitlines()) <= 600, f"{path.name}: split it by concern"
    long = [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"  # type: ignore[operator]
        for node in ast.walk(python_text.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60  # type: ignore[operator]
    ]
    assert not long, f"{path.name}: functions over 60 lines: {long}"


def test_no_module_imports_another_modules_private_names() -> None:
    offences = []
    for path in EVERY:
        here = _module(path)
        for node in ast.walk(python_text.parse(path.read_text())):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] in ("coinfer", "tests")
            ):
                private = [
                    a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")
                ]
                private += [p for p in node.module.split(".") if p.startswith("_") and not p.startswith("__")]
                if private and node.module != here:
                    offences.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module} {private}")
    assert not offences, "\n".join(offences)


def test_the_library_neither_prints_nor_asserts_on_what_it_is_given() -> None:
    """Only ``cli/`` writes to the terminal (the sandbox's child is a script of its own);
    ``assert`` guards internal invariants only, so none in the models layer, which takes
    user input and model output."""
    offences = []
    for path in SOURCES:
        rel = path.relative_to(ROOT / "src" / "coinfer")
        tree = python_text.parse(path.read_text())
        for node in ast.walk(tree):
            printing = (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
            )
            if printing and rel.parts[0] not in ("cli", "sandbox"):
                offences.append(f"{rel}:{node.lineno} print")
            if isinstance(node, ast.Assert) and rel.parts[0] == "models":
                offences.append(f"{rel}:{node.lineno} assert")
    assert not offences, offences
