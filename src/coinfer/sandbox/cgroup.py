"""A memory budget the OS enforces: child processes in a memory cgroup of their own.

``MemoryCgroup(limit)`` makes a cgroup under the host's memory hierarchy (v1:
``/sys/fs/cgroup/memory``, ``memory.limit_in_bytes``; v2: a child of this process's own
cgroup with ``memory.max``, no swap), runs commands in it (``run``: the child joins the
cgroup before it executes, so every page it touches, its page cache included, is charged
to the budget), reports the peak usage and whether the OOM killer fired, and removes the
cgroup when done. Where none can be made (no root, no memory controller) it raises
``BudgetError`` saying why: an unenforced budget is never measured.

``evict_page_cache(path)`` drops a file's cached pages (``posix_fadvise(DONTNEED)``), so
that a run starts by reading its weights from storage; pages another process keeps
mapped stay.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from coinfer.errors import BudgetError

__all__ = ["MemoryCgroup", "evict_page_cache", "fence_each", "remove_all"]

V1_ROOT = Path("/sys/fs/cgroup/memory")
V2_ROOT = Path("/sys/fs/cgroup")
_names = itertools.count()


def evict_page_cache(path: str | Path) -> None:
    """Drop ``path``'s pages from the page cache (those no process has mapped)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _v2_parent() -> Path | None:
    """This process's own v2 cgroup, if the unified hierarchy has the memory controller."""
    if not (V2_ROOT / "cgroup.controllers").is_file():
        return None
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        own = next(line[3:].strip() for line in lines if line.startswith("0::"))
    except (OSError, StopIteration):
        return None
    parent = V2_ROOT / own.lstrip("/")
    return parent if "memory" in (parent / "cgroup.controllers").read_text().split() else None


class MemoryCgroup:
    """A memory cgroup of ``limit`` bytes; a context manager that removes it on exit."""

    def __init__(self, limit: int, *, prefix: str = "coinfer") -> None:
        if limit <= 0:
            raise BudgetError(f"a memory budget must be positive, got {limit}")
        self.limit = limit
        name = f"{prefix}-{os.getpid()}-{next(_names)}"
        self.version, self.path = self._make(name)

    def _make(self, name: str) -> tuple[int, Path]:
        try:
            if (V1_ROOT / "memory.limit_in_bytes").is_file():
                path = V1_ROOT / name
                path.mkdir()
                (path / "memory.limit_in_bytes").write_text(str(self.limit))
                (path / "memory.swappiness").write_text("0")
                return 1, path
            parent = _v2_parent()
            if parent is not None:
                path = parent / name
                path.mkdir()
                (path / "memory.max").write_text(str(self.limit))
                (path / "memory.swap.max").write_text("0")
                return 2, path
        except OSError as exc:
            raise BudgetError(
                f"cannot make a memory cgroup: {exc}",
                hint="run as root on Linux with the memory controller (cgroup v1 or v2)",
            ) from exc
        raise BudgetError(
            "this host has no memory cgroup controller",
            hint="run on Linux with cgroup v1's memory hierarchy or v2's memory controller",
        )

    @property
    def _procs(self) -> Path:
        return self.path / ("tasks" if self.version == 1 else "cgroup.procs")

    def enter(self) -> None:
        """Move this process in (a child calls it before it executes)."""
        with open(self._procs, "w") as f:
            f.write(str(os.getpid()))

    def adopt(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) in: what it allocates from now on counts."""
        (self.path / "cgroup.procs").write_text(str(pid))

    def release(self, pid: int) -> None:
        """Move process ``pid`` back out, to the hierarchy's parent, so the cgroup can go."""
        (self.path.parent / "cgroup.procs").write_text(str(pid))

    def run(
        self, argv: Sequence[str], *, timeout: float | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside the cgroup; its stdout and stderr as text."""
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, env=env, preexec_fn=self.enter
        )

    def peak(self) -> int:
        """The most memory the cgroup has held, page cache included (bytes)."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.path / name).read_text())
        except (OSError, ValueError):
            return 0

    def reset_peak(self) -> None:
        if self.version == 1:
            (self.path / "memory.max_usage_in_bytes").write_text("0")

    def oom_kills(self) -> int:
        """How many processes the OOM killer ended in this cgroup."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except OSError:
            pass
        return 0

    def remove(self) -> None:
        try:
            if self.version == 1:
                (self.path / "memory.force_empty").write_text("0")
            self.path.rmdir()
        except OSError:
            pass

    def __enter__(self) -> MemoryCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def fence_each(groups: Sequence[MemoryCgroup], pids: Sequence[int]) -> Callable[[], None]:
    """A call that moves process ``pids[i]`` into ``groups[i]`` (``pids`` read when it runs):
    for processes that started outside their budget and enter it once the plan fits. What
    each allocates from then on counts; what it held before stays where it was."""

    def fence() -> None:
        for group, pid in zip(groups, pids, strict=True):
            group.adopt(pid)

    return fence


def remove_all(groups: Sequence[MemoryCgroup], *, member: int) -> None:
    """Remove ``groups``, moving process ``member`` (in one of them at most) out first."""
    for group in groups:
        with contextlib.suppress(OSError):
            group.release(member)
        group.remove()
