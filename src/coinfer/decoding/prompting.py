"""Prompts as engines take them: token ids, or a user's text in the model's chat format."""

from __future__ import annotations

from collections.abc import Sequence

from coinfer.errors import ConfigError, ContextOverflowError
from coinfer.models.base import SteerableModel

__all__ = ["as_prompt", "check_prompt"]


def as_prompt(model: SteerableModel, prompt: str | Sequence[int]) -> list[int]:
    """Token ids for ``prompt``: a string is a user's message in the model's chat template
    (plain text when it has none), a sequence of ints is taken as it is."""
    if isinstance(prompt, str):
        return model.user_prompt(prompt)
    return [int(t) for t in prompt]


def check_prompt(model: SteerableModel, prompt: Sequence[int]) -> None:
    """A prompt must be non-empty and leave room in the context window for one token."""
    if not prompt:
        raise ConfigError("the prompt is empty", hint="pass some text or token ids to continue")
    if len(prompt) >= model.n_ctx:
        raise ContextOverflowError(
            f"the prompt has {len(prompt)} tokens and {model.name}'s context window holds {model.n_ctx}",
            hint="shorten the prompt or load the model with a larger --ctx",
        )
