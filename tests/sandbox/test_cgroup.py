"""The memory budget the OS enforces: a child process in a memory cgroup."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from coinfer.errors import BudgetError
from coinfer.sandbox.cgroup import MemoryCgroup

MB = 1024 * 1024
HOLD = (  # touch every page of N MiB, then say so
    "import sys; b = bytearray(int(sys.argv[1]) * 1024 * 1024); "
    "b[::4096] = b'x' * (len(b) // 4096); print('held')"
)


@pytest.fixture
def cgroup_of() -> Iterator[type[MemoryCgroup]]:
    try:
        MemoryCgroup(64 * MB).remove()
    except BudgetError as exc:
        pytest.skip(f"no memory cgroup can be made here: {str(exc).splitlines()[0]}")
    yield MemoryCgroup


def test_a_child_within_the_budget_runs_and_its_peak_is_charged(cgroup_of: type[MemoryCgroup]) -> None:
    with cgroup_of(200 * MB) as cg:
        proc = cg.run([sys.executable, "-c", HOLD, "40"], timeout=60)
        assert proc.returncode == 0 and proc.stdout.strip() == "held"
        assert 40 * MB <= cg.peak() <= 200 * MB
        assert cg.oom_kills() == 0
    assert not cg.path.exists()  # removed on exit


def test_a_child_past_the_budget_is_killed_by_the_os(cgroup_of: type[MemoryCgroup]) -> None:
    with cgroup_of(100 * MB) as cg:
        proc = cg.run([sys.executable, "-c", HOLD, "300"], timeout=60)
        assert proc.returncode != 0 and "held" not in proc.stdout
        assert cg.oom_kills() >= 1


def test_a_budget_must_be_positive() -> None:
    with pytest.raises(BudgetError, match="positive"):
        MemoryCgroup(0)
