"""Shared fixtures: tiny random transformers models and the real SmolLM2 on llama.cpp."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from coinfer.decoding import Response
    from coinfer.models.base import SteerableModel

HAS_TORCH = (
    importlib.util.find_spec("torch") is not None and importlib.util.find_spec("transformers") is not None
)
HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None

# Fuzzing (``pytest.mark.fuzz``): a few dozen examples per property in every run, and a
# long profile for ``pytest -m fuzz --fuzz`` (about 30 minutes over every fuzz test).
settings.register_profile("coinfer", max_examples=40, deadline=None)
settings.register_profile(
    "fuzz", max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fuzz", action="store_true", help="run the fuzz tests' long Hypothesis profile")


def pytest_configure(config: pytest.Config) -> None:
    settings.load_profile("fuzz" if config.getoption("--fuzz") else "coinfer")


needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs the `torch` extra")
needs_llama = pytest.mark.skipif(not HAS_LLAMA, reason="needs the `llama` extra")


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two tiny random models on disk, one per architecture family."""
    from coinfer.testing import tiny_hf_model_dir

    root = tmp_path_factory.mktemp("tiny")
    return {
        arch: tiny_hf_model_dir(root / arch, arch=arch, seed=i) for i, arch in enumerate(("llama", "qwen2"))
    }


@pytest.fixture(scope="session")
def smollm_path() -> Path:
    """The real SmolLM2-135M GGUF, assembled into the user's cache once."""
    from coinfer import catalog

    return catalog.prepare("smollm2-135m")


@pytest.fixture(scope="session")
def smollm_llama(smollm_path: Path):  # type: ignore[no-untyped-def]
    from coinfer.models import load_model

    model = load_model("smollm2-135m", backend="llama.cpp", n_ctx=1024, n_seq_max=32)
    yield model
    model.close()


@pytest.fixture(scope="module")
def tiny_pair(
    tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[SteerableModel, SteerableModel]:
    """A tiny target and a tiny draft sharing one tokenizer (same architecture, other weights)."""
    from coinfer.models import load_model
    from coinfer.testing import tiny_hf_model_dir

    draft_dir = tiny_hf_model_dir(tmp_path_factory.mktemp("draft"), arch="llama", seed=11)
    return (
        load_model(str(tiny_dirs["llama"]), backend="transformers"),
        load_model(str(draft_dir), backend="transformers"),
    )


def plain(model: SteerableModel, prompt: list[int], max_tokens: int, sampling: object = None) -> Response:
    """The target alone: plain decoding (no drafter), the reference every engine must equal."""
    from coinfer.decoding import SamplingParams, SpecConfig, generate

    config = SpecConfig(max_tokens=max_tokens, sampling=sampling or SamplingParams())  # type: ignore[arg-type]
    return generate(model, prompt, draft=None, config=config)


NEAR_TIE = 0.5  # logits llama.cpp's batch rounding moves (the README's known gap)


def same_up_to_a_near_tie(model: SteerableModel, prompt: list[int], got: list[int]) -> bool:
    """``got`` is the target's own greedy tokens after ``prompt`` (as many), or departs
    from them at a near-tie (``departs_at_a_near_tie``)."""
    alone = plain(model, prompt, len(got)).tokens
    return got == alone or departs_at_a_near_tie(model, prompt, alone, got)


def departs_at_a_near_tie(model: SteerableModel, prompt: list[int], alone: list[int], got: list[int]) -> bool:
    """``got`` departs from ``alone`` (the target's own greedy tokens) at a near-tie: a
    token where both its choice and the target's are within ``NEAR_TIE`` of the best
    logit. That is what a batch's rounding may flip, since a batch prefills and verifies
    several requests' tokens in one forward (the logits here come from one more shape,
    a prefill, so either choice may be the top one)."""
    at = next((i for i, (a, b) in enumerate(zip(alone, got, strict=False)) if a != b), None)
    if at is None:
        return False  # one is cut short of the other: no token was chosen differently
    seq = model.new_sequence()
    logits = list(model.extend(seq, [*prompt, *alone[:at]])[-1])
    model.release(seq)
    best = max(logits)
    return best - logits[alone[at]] < NEAR_TIE and best - logits[got[at]] < NEAR_TIE
