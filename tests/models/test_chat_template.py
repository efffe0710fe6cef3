"""Chat templates come from the model itself and give the same ids on every backend."""

from __future__ import annotations

import pytest

from coinfer.errors import ConfigError, ModelError
from coinfer.models import ChatTemplate, load_model
from coinfer.testing import CHATML_TEMPLATE
from tests.conftest import needs_llama, needs_torch

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Sort [3, 1, 2] in Python — and say «done» 🙂."},
]


def test_render_opens_the_assistant_turn() -> None:
    template = ChatTemplate(CHATML_TEMPLATE)
    text = template.render(MESSAGES)
    assert text.startswith("<|im_start|>system\nYou are terse.<|im_end|>\n")
    assert text.endswith("<|im_start|>assistant\n")
    assert not template.render(MESSAGES, add_generation_prompt=False).endswith("assistant\n")


def test_bad_messages_and_missing_templates_say_what_to_do() -> None:
    with pytest.raises(ConfigError, match="role"):
        ChatTemplate(CHATML_TEMPLATE).render([{"role": "wizard", "content": "x"}])
    with pytest.raises(ConfigError, match="at least one message"):
        ChatTemplate(CHATML_TEMPLATE).render([])
    with pytest.raises(ModelError) as info:
        ChatTemplate(None).render(MESSAGES)
    assert "--raw" in (info.value.hint or "")
    refusing = ChatTemplate("{{ raise_exception('no system role') }}")
    with pytest.raises(ConfigError, match="no system role"):
        refusing.render(MESSAGES)


@needs_llama
@needs_torch
@pytest.mark.parametrize("name", ["smollm2-135m", pytest.param("qwen2.5-coder-0.5b", marks=pytest.mark.slow)])
def test_a_chat_prompt_is_the_same_ids_on_both_backends(name: str) -> None:
    on_llama = load_model(name, backend="llama.cpp", n_ctx=512)
    on_torch = load_model(name, backend="transformers", n_ctx=512)
    try:
        assert on_llama.template.source == on_torch.template.source
        ids = on_llama.chat_prompt(MESSAGES)
        assert ids == on_torch.chat_prompt(MESSAGES)
        assert on_llama.detokenize(ids) == on_torch.detokenize(ids)
        assert on_llama.text_prompt("def f(x):") == on_torch.text_prompt("def f(x):")
        assert on_llama.eos_ids == on_torch.eos_ids
    finally:
        on_llama.close()
        on_torch.close()
