"""Published architectures with random weights, for timing where no checkpoint reaches."""

from __future__ import annotations

import pytest

from coinfer.errors import ConfigError
from tests.conftest import needs_torch

pytestmark = needs_torch


def test_the_byte_tokenizer_round_trips_any_text() -> None:
    from coinfer.models.architectures import byte_tokenizer

    tok = byte_tokenizer()
    text = "def f(x):\n    return x  # ünïcode 🙂"
    ids = tok(text)["input_ids"]
    assert max(ids) < 256 and tok.decode(ids) == text
    assert tok.eos_token_id == tok.pad_token_id == 256


def test_an_unknown_architecture_is_refused_with_the_known_ones() -> None:
    from coinfer.models.architectures import random_weights_model

    with pytest.raises(ConfigError, match="qwen2.5-1.5b"):
        random_weights_model("qwen9-1t")


def test_weight_bytes_counts_tied_embeddings_once(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoModelForCausalLM

    from coinfer.models.architectures import weight_bytes

    model = AutoModelForCausalLM.from_pretrained(tiny_dirs["llama"])
    every = sum(p.numel() * p.element_size() for p in model.parameters())
    assert weight_bytes(model) == every  # untied: all of them
    model.lm_head.weight = model.model.embed_tokens.weight
    assert weight_bytes(model) == every - model.lm_head.weight.numel() * 4
