"""Benchmark peers that can run here without the C++ server."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinfer.models import load_model
from tests.conftest import needs_torch, plain


@needs_torch
def test_transformers_assisted_generation_is_timed_and_matches_greedy_decoding(
    tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    from coinfer.bench.peers import transformers_assisted
    from coinfer.testing import tiny_hf_model_dir

    draft_dir = tiny_hf_model_dir(tmp_path_factory.mktemp("assistant"), arch="llama", seed=5)
    target = load_model(str(tiny_dirs["llama"]), backend="transformers")
    prompt = target.text_prompt("def add(a, b):")
    expected = plain(target, prompt, 20).tokens
    peer = transformers_assisted(str(tiny_dirs["llama"]), str(draft_dir), None, target.eos_ids)
    try:
        run = peer(prompt, 20)
    finally:
        peer.close()
    assert run.tokens == expected
    assert run.decode_tps > 0 and run.e2e_tps > 0


def test_llama_cpp_peers_run_with_llama_cpps_own_kernel_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    """coinfer sets the threshold for its own processes; a peer is measured as its users run it."""
    from coinfer.bench.peers import peer_env
    from coinfer.models.llamacpp_tiled import TILED_MIN_ROWS_ENV

    monkeypatch.setenv(TILED_MIN_ROWS_ENV, "16")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    env = peer_env()
    assert TILED_MIN_ROWS_ENV not in env
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"


def test_a_built_llama_server_is_found_under_the_pinned_release(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The installed llama-cpp-python carries a local label (0.3.36+coinfer.…); the peers' scripts
    build from the release's sdist, into a folder named after the release (pyproject's pin)."""
    from coinfer.bench.peers import llama_server_binary

    monkeypatch.setenv("COINFER_PEERS", str(tmp_path))
    assert llama_server_binary() is None
    binary = tmp_path / "llama-server-0.3.36" / "build" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("")
    assert llama_server_binary() == binary
