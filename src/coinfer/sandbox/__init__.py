"""Runs code written by a remote model in a locked-down child process (``runner``; the
child itself is ``child.py``, run as a script)."""

from coinfer.sandbox.runner import DEFAULT_MODULES, SandboxResult, run

__all__ = ["DEFAULT_MODULES", "SandboxResult", "run"]
