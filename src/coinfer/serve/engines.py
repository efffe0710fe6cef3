"""Served models built from an engine's name and its parts (``coinfer serve --engine``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Literal

from coinfer.decoding.response import Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.errors import ConfigError
from coinfer.serve.schemas import ServeRequest
from coinfer.serve.served import EngineServed, PlainServed, Served

__all__ = [
    "ENGINES",
    "SERVED_ENGINES",
    "collective_served",
    "llmcad_served",
    "plain_served",
    "speculative_served",
]

ENGINES = ("plain", "speculative", "collective", "llmcad", "minions", "dragon", "jupiter")
SERVED_ENGINES = ("plain", "speculative", "collective", "llmcad")  # the others: refused with a hint, for now


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
        budget = _room(target, prompt, request.max_tokens)
        config = SpecConfig(max_tokens=budget, sampling=sampling, draft_tokens=draft_tokens)
        return stream(target, prompt, draft=drafter, config=config)

    draft = None if drafter is None else drafter.name
    return EngineServed(name or target.name, "speculative", target, run, draft=draft, max_queue=max_queue)


def _room(target: Any, prompt: list[int], max_tokens: int) -> int:
    room = target.n_ctx - len(prompt)
    if room < 1:
        raise ConfigError(f"the prompt has {len(prompt)} tokens; {target.name}'s window holds {target.n_ctx}")
    return min(max_tokens, room)


def llmcad_served(
    target: Any, draft: Any, *, name: str | None = None, max_queue: int = 64, **knobs: Any
) -> Served:
    """LLMCad over ``target`` with its resident ``draft`` (of the target's vocabulary), one
    request at a time; ``knobs``: ``LLMCadConfig``'s other fields."""
    from coinfer.engines.llmcad import LLMCadConfig, stream

    def run(
        request: ServeRequest, prompt: list[int], sampling: SamplingParams
    ) -> Generator[Response, None, None]:
        config = LLMCadConfig(
            max_tokens=_room(target, prompt, request.max_tokens), sampling=sampling, **knobs
        )
        return stream(target, prompt, draft=draft, config=config)

    return EngineServed(name or target.name, "llmcad", target, run, draft=draft.name, max_queue=max_queue)


def collective_served(
    target: Any, drafts: list[Any], *, name: str | None = None, max_queue: int = 64, **knobs: Any
) -> Served:
    """Collective decoding over ``target`` with ``drafts`` voting, one request at a time;
    ``knobs``: ``CollectiveConfig``'s other fields."""
    from coinfer.engines.collective import CollectiveConfig, stream

    def run(
        request: ServeRequest, prompt: list[int], sampling: SamplingParams
    ) -> Generator[Response, None, None]:
        config = CollectiveConfig(
            max_tokens=_room(target, prompt, request.max_tokens), sampling=sampling, **knobs
        )
        return stream(target, [prompt], drafts=drafts, config=config)

    names = ",".join(d.name for d in drafts)
    return EngineServed(name or target.name, "collective", target, run, draft=names, max_queue=max_queue)
