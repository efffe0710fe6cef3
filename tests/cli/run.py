"""Running the ``coinfer`` command as a user does: a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys

__all__ = ["assert_user_error", "coinfer"]


def coinfer(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "coinfer", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def assert_user_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """A user mistake: exit 2, a one-line error plus a hint, never a traceback."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    errors = [ln for ln in lines if ln.startswith("coinfer: error:")]
    assert len(errors) == 1, proc.stderr
    assert any(ln.startswith("hint:") for ln in lines), proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
