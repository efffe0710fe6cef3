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


TOOLS_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<call>{{ c.function.arguments | tojson }}</call>{% endfor %}"
    "{% endfor %}"
)
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_tools_reach_a_template_that_takes_them_and_are_refused_by_one_that_does_not() -> None:
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    template = ChatTemplate(TOOLS_TEMPLATE)
    assert template.takes_tools and not ChatTemplate(CHATML_TEMPLATE).takes_tools
    assert template.render(chat, tools=[TOOL]) == (
        '<tools>get_weather;</tools>[user]hi[assistant]<call>{"city": "Paris"}</call>'
    )
    assert template.render(chat[:1]) == "[user]hi"
    with pytest.raises(ConfigError, match="does not take tools") as refused:
        ChatTemplate(CHATML_TEMPLATE).render(chat[:1], tools=[TOOL])
    assert "tool_choice" in (refused.value.hint or "")


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
