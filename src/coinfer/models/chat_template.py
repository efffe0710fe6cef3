"""Chat templates taken from the model itself, rendered the same way on every backend.

The template string comes from the GGUF metadata (``tokenizer.chat_template``) or the
tokenizer config; both backends render it here with the sandboxed Jinja environment
Hugging Face uses (``trim_blocks``, ``lstrip_blocks``), so a chat prompt is the same
token ids whichever backend runs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from coinfer.errors import ConfigError, ModelError

__all__ = ["ChatTemplate", "Message", "check_messages"]

Message = Mapping[str, Any]
_ROLES = {"system", "user", "assistant", "tool"}


def check_messages(messages: Sequence[Message]) -> None:
    """Each message needs a known ``role`` and a string ``content``."""
    if not messages:
        raise ConfigError("a chat needs at least one message")
    for i, m in enumerate(messages):
        if m.get("role") not in _ROLES or not isinstance(m.get("content"), str):
            raise ConfigError(
                f"message {i} must be {{'role': one of {sorted(_ROLES)}, 'content': str}}, got {m!r}"
            )


def _raise_exception(message: str) -> None:
    raise ConfigError(f"the model's chat template refused the messages: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None, ensure_ascii: bool = False, **_: Any) -> str:
    return json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template and the special tokens it refers to."""

    source: str | None
    bos_token: str = ""
    eos_token: str = ""
    bos_id: int | None = None
    add_bos: bool = False

    @cached_property
    def _compiled(self) -> Any:
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            return env.from_string(self.source or "")
        except TemplateError as exc:
            raise ModelError(f"the model's chat template does not parse: {exc}") from exc

    @property
    def takes_tools(self) -> bool:
        """Whether the template tells the model of tools (it reads a ``tools`` variable)."""
        return bool(self.source) and "tools" in str(self.source)

    def render(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> str:
        """The prompt text for ``messages``; the assistant turn is opened when asked.
        ``tools``: OpenAI's function tools, which the template lists for the model (a
        template that takes none refuses them rather than drop them)."""
        if not self.source:
            raise ModelError(
                "this model has no chat template in its metadata",
                hint="pass --raw to send the prompt as plain text",
            )
        check_messages(messages)
        if tools and not self.takes_tools:
            raise ConfigError(
                "this model's chat template does not take tools, so the model would never hear of them",
                hint='serve a model whose template does (qwen2.5-coder-1.5b), or send tool_choice "none"',
            )
        extra = {"tools": [dict(t) for t in tools]} if tools else {}
        from jinja2.exceptions import TemplateError

        try:
            return str(
                self._compiled.render(
                    messages=[dict(m) for m in messages],
                    add_generation_prompt=add_generation_prompt,
                    bos_token=self.bos_token,
                    eos_token=self.eos_token,
                    **extra,
                )
            )
        except TemplateError as exc:
            raise ModelError(f"the model's chat template failed to render: {exc}") from exc
