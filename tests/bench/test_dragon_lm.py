"""The language-modelling workload of ``coinfer bench dragon``: the mixtures it scores are
the ones DRAGON samples, and a small run on SmolLM2 scores every system on one set of
tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coinfer.bench.dragon_lm import LM_SYSTEMS, LmWorkload, perplexities, replug, stdlib_documents
from coinfer.engines.dragon.aggregation import local_mixture, mixture, side_weight
from tests.conftest import HAS_LLAMA, HAS_TORCH


def test_the_two_sides_mixed_by_their_weights_are_replug_over_every_document() -> None:
    rng = np.random.default_rng(0)
    logps = np.log(rng.uniform(0.01, 1.0, size=(4, 7)))  # log p of 7 scored tokens under 4 documents
    relevance = np.array([3.0, 1.0, 2.5, 0.2])
    together, _ = replug(logps, relevance)
    (dev, h_dev), (cloud, h_cloud) = replug(logps[:2], relevance[:2]), replug(logps[2:], relevance[2:])
    eta = side_weight(h_dev, h_cloud)
    split = np.logaddexp(math.log(eta) + dev, math.log1p(-eta) + cloud)
    assert np.allclose(split, together)
    # the same weights as the engine's local mixture on full distributions
    probs = rng.dirichlet(np.ones(11), size=4)
    p, _ = local_mixture(probs, relevance)
    direct = np.exp(relevance - relevance.max()) / np.exp(relevance - relevance.max()).sum() @ probs
    assert np.allclose(p, direct)
    pd, hd = local_mixture(probs[:2], relevance[:2])
    pc, hc = local_mixture(probs[2:], relevance[2:])
    assert np.allclose(mixture(pd, pc, side_weight(hd, hc)), p)


def test_the_documentation_is_this_interpreters() -> None:
    docs = dict(stdlib_documents(["json", "no_such_module_here"]))
    assert list(docs) == ["json"] and "JSON" in docs["json"] and "dumps:" in docs["json"]


@pytest.mark.skipif(not (HAS_LLAMA and HAS_TORCH), reason="needs the llama and rag extras")
def test_a_small_run_scores_every_system(smollm_path: object) -> None:
    from coinfer.models import load_model

    model = load_model("smollm2-135m", n_threads=2)
    try:
        work = LmWorkload(
            window=64, windows=2, eval_modules=("json", "re"), corpus_modules=("json", "re", "csv")
        )
        out = perplexities(model, work)
    finally:
        model.close()
    assert set(out["perplexity"]) == set(LM_SYSTEMS)
    assert all(1.0 < v < 1e4 for v in out["perplexity"].values())
    assert [w["half"] for w in out["windows"]] == ["a", "b"]
    for w in out["windows"]:  # never the window's own module; the cloud has the better half
        assert len(w["device_documents"]) == len(w["cloud_documents"]) == 2
        assert not any(d.startswith(f"{w['module']}@") for d in w["device_documents"] + w["cloud_documents"])
    # no document helps nothing: RAG changes what the model predicts
    assert out["perplexity"]["dragon"] != out["perplexity"]["no-rag"]
