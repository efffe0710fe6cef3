"""Draft heads as the speculative loop's drafter, on the real SmolLM2 (llama.cpp): the
target keeps its hidden states without changing its logits, the heads read the row that
chose the target's latest token, and the output is the target's own."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from coinfer.decoding import Draft, HeadsDrafter, SpecConfig, generate
from coinfer.decoding.heads_drafter import open_heads_drafter
from coinfer.errors import ConfigError, ModelError
from coinfer.models import SteerableModel, load_model
from coinfer.models.gguf_layout import output_rows
from coinfer.models.heads import DraftHeads

REPEAT = "The number one billion is written 1000000000, and one trillion is 1"  # "000…": one token again


@pytest.fixture(scope="module")
def hidden_model(smollm_path: Path) -> Iterator[SteerableModel]:
    model = load_model("smollm2-135m", n_ctx=1024, n_threads=2, hidden_states=True)
    yield model
    model.close()


@pytest.fixture(scope="module")
def zero_heads(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Untrained heads: each guesses what the target's own head guesses, which is the
    token the target has just chosen (right where the text repeats itself)."""
    folder = tmp_path_factory.mktemp("heads")
    DraftHeads.zeros(model="smollm2-135m", digest="-", hidden=576, heads=3).save(folder)
    return f"heads:{folder}"


def test_keeping_hidden_states_leaves_the_output_as_it_was(hidden_model, smollm_llama) -> None:  # type: ignore[no-untyped-def]
    prompt = hidden_model.user_prompt("Name three fruits.")
    config = SpecConfig(max_tokens=32)
    assert generate(hidden_model, prompt, draft=None, config=config).tokens == (
        generate(smollm_llama, prompt, draft=None, config=config).tokens
    )
    seq = hidden_model.new_sequence()
    try:
        logits = hidden_model.extend(seq, prompt, last_only=True)
        hidden = hidden_model.last_hidden()
    finally:
        hidden_model.release(seq)
    assert hidden.shape == (1, 576)
    best = int(np.argmax(logits[-1]))
    near = np.argsort(logits[-1])[-5:]  # the projection of the state, read from the GGUF file
    projected = output_rows(hidden_model.path, near) @ hidden[0]
    assert int(near[int(np.argmax(projected))]) == best


def test_the_heads_read_the_row_that_chose_the_latest_token_and_lose_nothing(
    hidden_model: SteerableModel, zero_heads: str
) -> None:
    drafter = open_heads_drafter(zero_heads, hidden_model)
    assert isinstance(drafter, HeadsDrafter) and drafter.k == 3
    seen: list[tuple[int, list[int]]] = []
    propose = drafter.propose_many

    def watch(contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[Draft]:
        out = propose(contexts, k)
        seen.append((contexts[0][1][-1], out[0].tokens))
        return out

    drafter.propose_many = watch  # type: ignore[method-assign]
    prompt = hidden_model.text_prompt(REPEAT)
    config = SpecConfig(max_tokens=24, draft_tokens=3)
    drafted = generate(hidden_model, prompt, draft=drafter, config=config)
    plain = generate(hidden_model, prompt, draft=None, config=config)
    assert drafted.tokens == plain.tokens
    guessed = [(last, d) for last, d in seen if d]
    assert len(guessed) >= len(seen) - 1
    # zero heads repeat the target's own choice: the token just chosen, on (nearly) every
    # round (the projection from the GGUF file may break a near-tie the other way)
    assert sum(d[0] == last for last, d in guessed) >= 0.9 * len(guessed)
    assert drafted.stats.accepted > 0  # the zeros repeat: guesses hold


def test_heads_are_refused_by_another_model_or_a_target_without_hidden_states(
    hidden_model: SteerableModel, smollm_llama: SteerableModel, tmp_path: Path
) -> None:
    DraftHeads.zeros(model="qwen2.5-coder-0.5b", digest="-", hidden=896, heads=2).save(tmp_path / "other")
    with pytest.raises(ConfigError, match="trained for qwen2.5-coder-0.5b"):
        open_heads_drafter(f"heads:{tmp_path / 'other'}", hidden_model)
    DraftHeads.zeros(model="smollm2-135m", digest="-", hidden=576, heads=2).save(tmp_path / "mine")
    with pytest.raises(ModelError, match="keeps no hidden states"):
        open_heads_drafter(f"heads:{tmp_path / 'mine'}", smollm_llama)
    with pytest.raises(ConfigError, match="holds no draft heads"):
        open_heads_drafter(f"heads:{tmp_path / 'none'}", hidden_model)
