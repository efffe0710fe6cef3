"""The README's first program for each engine runs as written, with the real models."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import needs_llama

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
PROGRAMS = dict(re.findall(r"<!-- program: (\w+) -->\n```python\n(.*?)```", README, flags=re.S))


def test_the_readme_has_a_program_per_engine() -> None:
    assert set(PROGRAMS) == {"speculative", "collective", "llmcad", "minions", "dragon"}
    for name, code in PROGRAMS.items():
        statements = [line for line in code.splitlines() if line.strip() and not line.startswith("import")]
        assert len(statements) == 3, (name, statements)  # three lines past the import


@pytest.mark.slow
@needs_llama
@pytest.mark.parametrize("name", ["speculative", "collective", "llmcad", "minions", "dragon"])
def test_each_program_runs_as_written(name: str) -> None:
    proc = subprocess.run([sys.executable, "-c", PROGRAMS[name]], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip(), proc.stderr[-2000:]
    if name in ("minions", "dragon"):
        assert "8080" in proc.stdout  # the answer, from the document
