"""``coinfer bench decode --device cuda``: its parts, run on the CPU with tiny models
(CI has no GPU); the figures themselves come from a GPU machine (docs/bench/decode-cuda)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinfer.bench.decode_cuda import CudaDecodeConfig
from coinfer.errors import ConfigError
from tests.cli.run import assert_user_error, coinfer
from tests.conftest import needs_torch


def test_the_config_names_the_architectures_it_can_build() -> None:
    with pytest.raises(ConfigError, match="qwen2.5-7b"):
        CudaDecodeConfig(out="x", models=("smollm2-135m",))
    with pytest.raises(ConfigError, match=">= 1"):
        CudaDecodeConfig(out="x", ks=(0, 1))


def test_llmcad_trees_hang_their_branches_from_the_context() -> None:
    from coinfer.bench.decode_cuda import llmcad_tree

    tree = llmcad_tree(48)
    assert len(tree.tokens) == 48
    assert tree.parents.count(-1) == 4  # four branches, each a chain of 12
    assert max(tree.depths()) == 11


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from coinfer.models import load_model
    from coinfer.testing import tiny_hf_model_dir

    folder = tiny_hf_model_dir(tmp_path_factory.mktemp("m"), arch="llama", seed=5, context=2048)
    static = load_model(str(folder), backend="transformers", kv="static", n_ctx=2048, n_seq_max=4)
    return static, load_model(str(folder), backend="transformers", kv="dynamic", n_ctx=2048)


@needs_torch
def test_forward_timings_leave_no_sequence_behind(pair) -> None:  # type: ignore[no-untyped-def]
    from coinfer.bench.decode_cuda import eager_forward_ms, llmcad_tree, static_forward_ms, static_tree_ms

    static, eager = pair
    assert static_forward_ms(static, 64, 4, 2, repeats=2) > 0
    assert static_tree_ms(static, 64, llmcad_tree(12), repeats=2) > 0
    assert eager_forward_ms(eager, 64, 4, repeats=2) > 0
    assert static.live_sequences == eager.live_sequences == 0


@needs_torch
def test_static_caches_decode_the_suite_like_the_eager_path(pair) -> None:  # type: ignore[no-untyped-def]
    from coinfer.bench.decode_cuda import identity_counts, suite_ids
    from coinfer.models.architectures import byte_tokenizer

    prompts = suite_ids(byte_tokenizer(), 4, 1500)
    assert prompts and all(len(p) <= 1500 for p in prompts)
    assert identity_counts(*pair, prompts, 12) == (len(prompts), len(prompts))


@needs_torch
def test_without_a_gpu_the_cli_says_so_in_one_line(tmp_path: Path) -> None:
    proc = coinfer(
        "bench", "decode", "--device", "cuda", "--out", str(tmp_path), env={"CUDA_VISIBLE_DEVICES": ""}
    )
    assert_user_error(proc, "needs a CUDA GPU")


def test_the_report_sets_each_tree_beside_a_chain_of_its_width() -> None:
    from coinfer.bench.decode_cuda import report_markdown

    config = CudaDecodeConfig(out="x", models=("qwen2.5-0.5b",), ks=(1, 16), batches=(1,), eager_ks=(1,))
    row = {
        "model": "qwen2.5-0.5b",
        "limit_ms": 0.23,
        "static_ms": {"1": {"1": 1.0, "16": 1.2}},
        "eager_ms": {"1": 17.0},
        "tree_ms": {"16": 1.25, "48": 1.5},
        "tree_chain_ms": {"16": 1.2, "48": 1.4},
    }
    env = {"gpu": "GPU", "bandwidth_gbs": 4000, "torch": "t", "transformers": "x"}
    text = report_markdown({"environment": env, "results": [row], "identity": []}, config)
    assert "| qwen2.5-0.5b | 1.25 / 1.20 | 1.50 / 1.40 | 1.50x (tree 48) |" in text
