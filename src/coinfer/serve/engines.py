"""Served models built from an engine's name and its parts (``coinfer serve --engine``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Literal

from coinfer.decoding.response import Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.errors import ConfigError
from coinfer.serve.schemas import ServeRequest
from coinfer.serve.served import EngineServed, PlainServed, Served

__all__ = ["ENGINES", "SERVED_ENGINES", "plain_served", "speculative_served"]

ENGINES = ("plain", "speculative", "collective", "llmcad", "minions", "dragon", "jupiter")
SERVED_ENGINES = ("plain", "speculative")  # the others are refused with a hint, for now


def plain_served(chat: Any, *, name: str | None = None, max_queue: int = 64) -> Served:
    """A ``LocalChat``: its model decodes every request in one continuous batch."""
    return PlainServed(chat, name=name, max_queue=max_queue)


def speculative_served(
    target: Any,
    drafter: Any,
    *,
    name: str | None = None,
    draft_tokens: int | Literal["auto"] = "auto",
    max_queue: int = 64,
) -> Served:
    """The speculative engine over ``target`` with ``drafter`` (None: plain decoding), one
    request at a time; the drafter forgets each request at its end."""
    from coinfer.decoding.speculative import SpecConfig, stream

    def run(
        request: ServeRequest, prompt: list[int], sampling: SamplingParams
    ) -> Generator[Response, None, None]:
        room = target.n_ctx - len(prompt)
        if room < 1:
            raise ConfigError(
                f"the prompt has {len(prompt)} tokens; {target.name}'s window holds {target.n_ctx}"
            )
        config = SpecConfig(
            max_tokens=min(request.max_tokens, room), sampling=sampling, draft_tokens=draft_tokens
        )
        return stream(target, prompt, draft=drafter, config=config)

    return EngineServed(name or target.name, "speculative", target, run, max_queue=max_queue)
