"""Training heads by self-distillation on a tiny random model: the model's own answers,
heads that learn them, a checkpoint that resumes to the same weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import needs_torch

pytestmark = needs_torch

PROMPTS = ["the quick brown fox", "jumps over the lazy dog", "pack my box with", "five dozen jugs"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from coinfer.models.load import load_model
    from coinfer.testing import tiny_hf_model_dir

    folder = tiny_hf_model_dir(tmp_path_factory.mktemp("heads") / "m", arch="qwen2", seed=5)
    return load_model(str(folder), backend="transformers")


@pytest.fixture(scope="module")
def corpus(tiny, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from coinfer.models.heads_training import generate_corpus

    path = tmp_path_factory.mktemp("corpus") / "answers.jsonl"
    return generate_corpus(tiny, PROMPTS, path, max_tokens=48)


def test_answers_are_the_models_greedy_text_and_a_stopped_run_resumes(tiny, corpus, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from coinfer.models.heads_training import generate_corpus

    row = corpus[0]
    seq = tiny.new_sequence()
    logits = tiny.extend(seq, row["prompt"])
    assert int(logits[-1].argmax()) == row["answer"][0]  # the model's own first choice
    path = tmp_path / "answers.jsonl"
    path.write_text(
        json.dumps({"prompt": [1], "answer": [7, 7]}) + "\n" + '{"prompt": [1'
    )  # stopped mid-line
    rows = generate_corpus(tiny, PROMPTS[:2], path, max_tokens=48)
    assert rows[0] == {"prompt": [1], "answer": [7, 7]}  # kept, not generated again
    assert rows[1] == corpus[1]


def _features(tiny, corpus, k: int = 2):  # type: ignore[no-untyped-def]
    from coinfer.models.heads_training import corpus_features

    return corpus_features(tiny.model, corpus, k=k)


def test_features_pair_each_position_with_the_tokens_after_it(tiny, corpus) -> None:  # type: ignore[no-untyped-def]
    data = _features(tiny, corpus)
    first = corpus[0]
    n = len(first["answer"])
    assert data.hidden.shape[0] == data.after.shape[0] == sum(len(r["answer"]) for r in corpus)
    assert data.after[:n, 0].tolist() == first["answer"]  # position i: the next token ...
    assert data.after[: n - 1, 1].tolist() == first["answer"][1:]  # ... and the one after it
    assert data.after[n - 1, 1] == -1  # past the answer's end


def test_trained_heads_beat_untrained_ones_and_a_checkpoint_resumes_exactly(
    tiny, corpus, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    import torch

    from coinfer.models.heads import DraftHeads
    from coinfer.models.heads_training import TrainConfig, head_accuracy, train_heads

    data = _features(tiny, corpus)
    lm_head = tiny.model.lm_head

    def fresh() -> DraftHeads:
        return DraftHeads.zeros(model="m", digest="d", hidden=data.hidden.shape[1], heads=2)

    before = head_accuracy(fresh(), lm_head, data)
    config = TrainConfig(epochs=20, batch=32, lr=1e-2, checkpoint_every=1)
    whole = train_heads(fresh(), lm_head, data, config=config)
    after = head_accuracy(whole, lm_head, data)
    assert after[0] > before[0] + 0.3 and after[1] > before[1] + 0.3, (before, after)
    ckpt = tmp_path / "ckpt.safetensors"
    train_heads(
        fresh(),
        lm_head,
        data,
        config=TrainConfig(epochs=7, batch=32, lr=1e-2, checkpoint_every=1),
        checkpoint=ckpt,
    )
    resumed = train_heads(fresh(), lm_head, data, config=config, checkpoint=ckpt)
    assert torch.allclose(resumed.weight, whole.weight, atol=1e-6)
    assert torch.allclose(resumed.bias, whole.bias, atol=1e-6)
