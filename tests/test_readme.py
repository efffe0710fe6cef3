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


ROOT = Path(__file__).resolve().parents[1]
ENGINE_PROGRAMS = ["speculative", "collective", "llmcad", "minions", "dragon", "jupiter"]


def test_the_readme_has_a_program_per_engine() -> None:
    assert set(PROGRAMS) == set(ENGINE_PROGRAMS)
    for name, code in PROGRAMS.items():
        statements = [line for line in code.splitlines() if line.strip() and not line.startswith("import")]
        assert len(statements) == 3, (name, statements)  # three lines past the import


def test_the_readme_is_read_in_one_sitting_and_links_only_inside_the_repository() -> None:
    """At most ~300 lines; every relative link names a file or folder of the repository
    (the rest is the documentation site under docs/, built strictly by ``make docs``)."""
    assert len(README.splitlines()) <= 300
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    assert links
    for link in links:
        if not link.startswith("https://"):
            assert not link.startswith(("/", "..")) and (ROOT / link).exists(), link


@pytest.mark.slow
@needs_llama
@pytest.mark.parametrize("name", ENGINE_PROGRAMS)
def test_each_program_runs_as_written(name: str) -> None:
    proc = subprocess.run([sys.executable, "-c", PROGRAMS[name]], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip(), proc.stderr[-2000:]
    if name in ("minions", "dragon"):
        assert "8080" in proc.stdout  # the answer, from the document
