"""docs/limits.md lists every boundary's cap; each value there is the code's."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

LIMITS = (Path(__file__).parent.parent / "docs" / "limits.md").read_text()


def _row(constant: str) -> str:
    rows = [line for line in LIMITS.splitlines() if f"`{constant}`" in line]
    assert len(rows) == 1, f"docs/limits.md should have one row for {constant}"
    return rows[0]


@pytest.mark.parametrize(
    ("module", "name", "written"),
    [
        ("coinfer.serve.app", "MAX_BODY", "64 MiB"),
        ("coinfer.serve.schemas", "MAX_N", "| 8 |"),
        ("coinfer.serve.schemas", "MAX_STOPS", "| 4 |"),
        ("coinfer.serve.schemas", "MAX_TOKENS", "1,048,576"),
        ("coinfer.serve.schemas", "MAX_DOCUMENTS", "| 64 |"),
        ("coinfer.engines.minions.documents", "MAX_DOCUMENT_BYTES", "64 MiB"),
        ("coinfer.engines.minions.job_api", "MAX_JOBS", "256"),
        ("coinfer.engines.minions.job_api", "MAX_CHUNK_CHARS", "24,000"),
        ("coinfer.engines.minions.parsing", "MAX_STARTS", "64 starts"),
        ("coinfer.models.gguf_layout", "MAX_DIMS", "4 dimensions"),
        ("coinfer.transport.link", "MAX_MESSAGE_BYTES", "1 MiB"),
        ("coinfer.engines.dragon.config", "MAX_LOOKAHEAD", "64 tokens"),
        ("coinfer.engines.jupiter.wire", "MAX_MESSAGE", "1 MiB"),
        ("coinfer.engines.jupiter.branches", "MAX_NODES", "| 4096 |"),
        ("coinfer.engines.jupiter.outline", "MAX_POINTS", "| 8 |"),
    ],
)
def test_each_documented_cap_is_the_codes(module: str, name: str, written: str) -> None:
    import importlib

    value = getattr(importlib.import_module(module), name)
    row = _row(f"{module.removeprefix('coinfer.')}.{name}")
    assert written in row
    number = written.strip("| ").split()[0].replace(",", "")
    scale = {"MiB": 1 << 20}.get(written.split()[-1], 1)
    if number.isdigit():
        assert value == int(number) * scale


def test_the_sandboxs_documented_defaults_are_its_own() -> None:
    from coinfer.sandbox.runner import run

    defaults = {k: p.default for k, p in inspect.signature(run).parameters.items()}
    row = _row("sandbox.runner.run")
    assert f"{defaults['timeout_s']:g} s" in row and f"{defaults['memory_mb']} MB" in row
    assert f"{defaults['output_limit']:,} bytes" in row
