"""Runs code written by a remote model in a locked-down child process (``runner``; the
child itself is ``child.py``, run as a script), and holds processes to OS-enforced memory
budgets (``cgroup``: memory cgroups, for Jupiter's devices and the benchmarks)."""

from coinfer.sandbox.runner import DEFAULT_MODULES, SandboxResult, run

__all__ = ["DEFAULT_MODULES", "SandboxResult", "run"]
