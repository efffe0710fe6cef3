"""Sliding-window attention: the paths that build their own masks (token trees, static
caches) hide what the model itself hides, past its window; the paths that cannot refuse."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coinfer.errors import ModelError
from tests.conftest import needs_torch

pytestmark = needs_torch

WINDOW = 16
# a tree of depth 3 with two branches from the context, after a prompt three windows long
TREE_PARENTS = [-1, 0, 0, 1, 3, -1, 5]
TREE_TOKENS = [7, 21, 5, 33, 2, 40, 11]


@pytest.fixture(scope="module")
def mistral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every layer slides the window."""
    from coinfer.testing import tiny_hf_model_dir

    return tiny_hf_model_dir(tmp_path_factory.mktemp("mistral"), arch="mistral", seed=2, window=WINDOW)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first layer sees the whole context, the second slides the window."""
    from coinfer.testing import tiny_hf_model_dir

    return tiny_hf_model_dir(tmp_path_factory.mktemp("mixed"), arch="qwen2", seed=2, window=WINDOW)


@functools.cache
def _transformers_model(folder: Path) -> Any:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder).eval()


def _reference(folder: Path, ids: list[int]) -> np.ndarray:
    """transformers' own logits for ``ids`` in one forward from nothing (its own masks), from
    a copy of the model read once, apart from the one under test."""
    import torch

    with torch.inference_mode():
        return _transformers_model(folder)(torch.tensor([ids])).logits[0].float().numpy()


def _path(node: int) -> list[int]:
    """The tree's tokens from its root to ``node``."""
    from coinfer.models.tree import TokenTree

    return [TREE_TOKENS[n] for n in TokenTree.of(TREE_TOKENS, TREE_PARENTS).path_to(node)]


def _prompt() -> list[int]:
    return np.random.default_rng(5).integers(0, 300, 3 * WINDOW).tolist()


def _check_against_the_model(model: Any, folder: Path) -> None:
    """The prompt, a tree after it, its kept path and one more token: each of their logits
    is the model's own for that text."""
    prompt = _prompt()
    seq = model.new_sequence()
    np.testing.assert_allclose(model.extend(seq, prompt), _reference(folder, prompt), atol=1e-4)
    tree = model.extend(seq, TREE_TOKENS, parents=TREE_PARENTS)
    for node in range(len(TREE_TOKENS)):
        expected = _reference(folder, prompt + _path(node))[-1]
        np.testing.assert_allclose(tree[node], expected, atol=1e-4, err_msg=f"tree node {node}")
    model.commit_path(seq, [0, 1, 3, 4])
    after = model.extend(seq, [9])[-1]
    np.testing.assert_allclose(after, _reference(folder, [*prompt, *_path(4), 9])[-1], atol=1e-4)
    model.release(seq)


@pytest.mark.parametrize("kv", ["dynamic", "static"])
def test_every_layer_s_window_is_applied_in_trees_and_on_static_caches(mistral: Path, kv: str) -> None:
    from coinfer.models import load_model

    model = load_model(str(mistral), backend="transformers", kv=kv, n_ctx=256)
    _check_against_the_model(model, mistral)


def test_windowed_and_whole_context_layers_each_get_their_own_tree_mask(mixed: Path) -> None:
    from coinfer.models import load_model

    model = load_model(str(mixed), backend="transformers", kv="dynamic", n_ctx=256)
    _check_against_the_model(model, mixed)


def test_a_window_that_covers_the_context_changes_nothing(mistral: Path) -> None:
    """A context no longer than the window: the static caches need no window at all."""
    from coinfer.models import load_model
    from coinfer.models.windows import window_within

    model = load_model(str(mistral), backend="transformers", kv="static", n_ctx=WINDOW)
    assert window_within(model.model.config, model.n_ctx) is None
    prompt = _prompt()[:WINDOW]
    seq = model.new_sequence()
    np.testing.assert_allclose(model.extend(seq, prompt), _reference(mistral, prompt), atol=1e-4)


def test_static_caches_refuse_layers_of_two_kinds_in_one_line(mixed: Path) -> None:
    from coinfer.models import load_model

    with pytest.raises(ModelError, match="layer types") as info:
        load_model(str(mixed), backend="transformers", kv="static", n_ctx=256)
    assert "kv='dynamic'" in (info.value.hint or "")


def test_a_jupiter_stage_refuses_a_window_shorter_than_its_context(mistral: Path) -> None:
    from coinfer.engines.jupiter.static_stage import StaticStage

    with pytest.raises(ModelError, match="window of 16 tokens over a context of 256") as info:
        StaticStage.load(mistral, 0, 2, device="cpu", n_ctx=256)
    assert info.value.hint == "pass --ctx 16 or less"
    assert StaticStage.load(mistral, 0, 2, device="cpu", n_ctx=WINDOW).n_ctx == WINDOW


def test_a_jupiter_pipeline_refuses_a_window_shorter_than_its_context_before_it_starts(
    mistral: Path,
) -> None:
    """Its stages' branch masks let every token see the whole context."""
    from coinfer.engines.jupiter.cluster import EdgeCluster

    with pytest.raises(ModelError, match="a Jupiter pipeline attends over the whole context") as info:
        EdgeCluster(str(mistral), world=1, master="127.0.0.1:1", threads=1, n_ctx=256)
    assert info.value.hint == "pass --ctx 16 or less"
