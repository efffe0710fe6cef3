"""Shared by the Jupiter tests: a tiny model with heads trained on its own text."""

from __future__ import annotations

import pytest

PROMPT = [5, 17, 33, 8, 90, 41, 7, 7, 64, 12, 3, 99, 21, 40]


@pytest.fixture(scope="session")
def model_and_heads(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A tiny 4-layer model and heads trained on its own greedy answers (this prompt's
    among them), so that the heads guess well."""
    from coinfer.models.heads import DraftHeads, config_digest
    from coinfer.models.heads_training import TrainConfig, corpus_features, generate_corpus, train_heads
    from coinfer.models.load import load_model
    from coinfer.testing import tiny_hf_model_dir

    root = tmp_path_factory.mktemp("sd")
    folder = tiny_hf_model_dir(root / "m", arch="qwen2", layers=4, seed=9)
    model = load_model(str(folder), backend="transformers")
    rows = generate_corpus(model, ["a b c", "hello there", "x y"], root / "answers.jsonl", max_tokens=40)
    seq = model.new_sequence()  # the test prompt's own answer, as raw ids
    answer: list[int] = []
    logits = model.extend(seq, PROMPT)
    for _ in range(40):
        answer.append(int(logits[-1].argmax()))
        logits = model.extend(seq, answer[-1:])
    data = corpus_features(model.model, [*rows, {"prompt": PROMPT, "answer": answer}], k=3)
    heads = DraftHeads.zeros(model="tiny", digest=config_digest(folder), hidden=data.hidden.shape[1], heads=3)
    train_heads(heads, model.model.lm_head, data, config=TrainConfig(epochs=30, batch=64, lr=1e-2))
    heads.save(root / "heads")
    return str(folder), str(root / "heads")
