"""Reading a mapped model's weights ahead within a memory budget."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coinfer.errors import ConfigError
from coinfer.models.prefetch import WeightPrefetcher, parse_size, resident_anonymous_bytes
from tests.conftest import needs_llama


def test_sizes_read_as_a_user_writes_them() -> None:
    assert parse_size("800M") == 800 * 1024**2
    assert parse_size("1.5G") == int(1.5 * 1024**3)
    assert parse_size("512MiB") == 512 * 1024**2
    assert parse_size("900000000") == 900_000_000
    with pytest.raises(ConfigError, match="memory size"):
        parse_size("lots")


def _wait_for(prefetcher: WeightPrefetcher, expected: int) -> None:
    deadline = time.monotonic() + 10
    while prefetcher.bytes_read < expected and time.monotonic() < deadline:
        time.sleep(0.01)


@needs_llama
def test_warming_reads_the_first_layers_up_to_the_headroom_and_no_further(smollm_path: Path) -> None:
    resident = resident_anonymous_bytes()
    room = 20 * 1024**2
    prefetcher = WeightPrefetcher(smollm_path, resident + room + 1024**2, reserve=1024**2)
    try:
        assert 0 < prefetcher.headroom() <= room + 64 * 1024**2
        expected = prefetcher.headroom()
        prefetcher.warm()
        _wait_for(prefetcher, expected)
        time.sleep(0.05)
        assert expected <= prefetcher.bytes_read <= expected + 1024**2  # and then it stops
        prefetcher.pause()
        assert prefetcher.spans[0].name.startswith("blk.0.")
    finally:
        prefetcher.close()


@needs_llama
def test_a_budget_the_process_already_fills_reads_nothing(smollm_path: Path) -> None:
    prefetcher = WeightPrefetcher(smollm_path, 1024**2)
    try:
        assert prefetcher.headroom() == 0
        prefetcher.warm()
        time.sleep(0.05)
        assert prefetcher.bytes_read == 0
    finally:
        prefetcher.close()
