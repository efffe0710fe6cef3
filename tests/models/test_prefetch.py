"""Reading a mapped model's weights ahead within a memory budget."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
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


@needs_llama
def test_a_model_reports_each_layer_its_forward_finishes_and_its_logits_do_not_change(
    smollm_path: Path,
) -> None:
    from coinfer.models.llamacpp import LlamaCppModel

    model = LlamaCppModel(smollm_path, n_ctx=128, n_seq_max=2, layer_progress=True, use_mmap=True)
    try:
        seq = model.new_sequence()
        quiet = model.extend(seq, [1, 2, 3, 4])
        layers: list[int] = []
        model.layer_listener = layers.append
        model.truncate(seq, 0)
        heard = model.extend(seq, [1, 2, 3, 4])
        assert layers == list(range(int(model.metadata["llama.block_count"])))
        np.testing.assert_array_equal(quiet, heard)
    finally:
        model.close()


@needs_llama
def test_following_a_forward_reads_at_most_a_window_ahead_of_its_layer(smollm_path: Path) -> None:
    """The prefetcher follows the layers a model reports: it reads the next layers up to
    its window, waits while the forward is in layer 0, and reads on as it gets on; a
    mapping of the file in this process is advised sequential."""
    from coinfer.models.llamacpp import LlamaCppModel

    model = LlamaCppModel(smollm_path, n_ctx=128, n_seq_max=2, layer_progress=True, use_mmap=True)
    prefetcher = WeightPrefetcher(smollm_path, resident_anonymous_bytes() + 64 * 1024**2, model=model)
    try:
        assert prefetcher.sequential  # llama.cpp has the file mapped
        assert model.layer_listener == prefetcher.layer_done
        prefetcher.follow(from_start=True)
        window = prefetcher.window  # a third of what the budget leaves
        assert 20 * 1024**2 <= window <= 22 * 1024**2
        _wait_for(prefetcher, window)
        time.sleep(0.05)
        assert prefetcher.bytes_read == window  # and then it waits for the forward
        prefetcher.layer_done(0)
        layer_0 = sum(s.size for s in prefetcher.spans if s.name.startswith("blk.0."))
        assert layer_0 < window
        _wait_for(prefetcher, layer_0 + window)
        time.sleep(0.05)
        assert prefetcher.bytes_read == layer_0 + window
    finally:
        prefetcher.close()
        assert model.layer_listener is None
        model.close()


@needs_llama
def test_a_new_forward_sends_the_prefetcher_back_to_the_layer_it_is_in(smollm_path: Path) -> None:
    """A prefill runs several forwards: when the layers reported start over, reading
    starts over from there instead of staying at the end of the weights."""
    prefetcher = WeightPrefetcher(smollm_path, resident_anonymous_bytes() + 64 * 1024**2)
    try:
        last = max(int(s.name.split(".")[1]) for s in prefetcher.spans if s.name.startswith("blk."))
        prefetcher.layer_done(last)
        assert prefetcher._cursor == (prefetcher._layer_spans["tail"], 0)
        prefetcher.layer_done(0)
        assert prefetcher._cursor == (prefetcher._layer_spans[1], 0)
        prefetcher.layer_done(3)
        prefetcher.layer_done(2)  # a new forward, done with layer 2: on from layer 3
        assert prefetcher._cursor == (prefetcher._layer_spans[3], 0)
    finally:
        prefetcher.close()
