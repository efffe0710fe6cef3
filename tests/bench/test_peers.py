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
