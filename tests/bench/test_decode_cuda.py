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


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from coinfer.models import load_model
    from coinfer.testing import tiny_hf_model_dir

    folder = tiny_hf_model_dir(tmp_path_factory.mktemp("m"), arch="llama", seed=5, context=2048)
    static = load_model(str(folder), backend="transformers", kv="static", n_ctx=2048, n_seq_max=4)
    return static, load_model(str(folder), backend="transformers", kv="dynamic", n_ctx=2048)


@needs_torch
def test_forward_timings_leave_no_sequence_behind(pair) -> None:  # type: ignore[no-untyped-def]
    from coinfer.bench.decode_cuda import eager_forward_ms, static_forward_ms

    static, eager = pair
    assert static_forward_ms(static, 64, 4, 2, repeats=2) > 0
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
