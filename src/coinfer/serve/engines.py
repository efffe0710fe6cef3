"""Served models built from an engine's name and its parts (``coinfer serve --engine``)."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Literal

from coinfer.chat.base import ChatModel, Usage
from coinfer.decoding.response import Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.errors import ConfigError
from coinfer.serve.schemas import ServeRequest
from coinfer.serve.served import EngineServed, PlainServed, Served

__all__ = [
    "ENGINES",
    "collective_served",
    "dragon_served",
    "jupiter_served",
    "llmcad_served",
    "minions_served",
    "plain_served",
    "speculative_served",
]

ENGINES = ("plain", "speculative", "collective", "llmcad", "minions", "dragon", "jupiter")


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
    """Collective decoding over ``target`` with ``drafts`` voting: requests join the
    running batch between rounds (``batched``), or with ``pipeline`` run one at a time;
    ``knobs``: ``CollectiveConfig``'s other fields (``max_batch``: requests together)."""
    from coinfer.engines.collective import CollectiveConfig, stream
    from coinfer.serve.batched import CollectiveServed

    if not knobs.get("pipeline"):
        return CollectiveServed(target, drafts, CollectiveConfig(**knobs), name=name or target.name,
                                max_queue=max_queue)  # fmt: skip

    def run(
        request: ServeRequest, prompt: list[int], sampling: SamplingParams
    ) -> Generator[Response, None, None]:
        config = CollectiveConfig(
            max_tokens=_room(target, prompt, request.max_tokens), sampling=sampling, **knobs
        )
        return stream(target, [prompt], drafts=drafts, config=config)

    names = ",".join(d.name for d in drafts)
    return EngineServed(name or target.name, "collective", target, run, draft=names, max_queue=max_queue)


def minions_served(
    local: ChatModel | None,
    remote: ChatModel,
    config: Any,
    *,
    name: str,
    max_queue: int = 64,
    on_release: Any = None,
) -> Served:
    """A local–remote protocol (``config``: ``MinionsConfig``, ``MinionConfig``…): each
    chat's last user message is the question about the ``documents`` its body brings,
    which only ``local`` reads. The usage is the remote's, what the cloud bills."""
    from coinfer.engines import minions

    def run(
        request: ServeRequest, prompt: list[int], sampling: SamplingParams
    ) -> Generator[Response, None, None]:
        return minions.stream(
            request.question(), list(request.documents or ()), local=local, remote=remote, config=config
        )

    def remote_usage(last: Response) -> Usage | None:
        usage = last.extras.get("usage", {}).get("remote")
        return Usage(**usage) if usage else None

    return EngineServed(
        name, "minions", None, run, draft=local.name if local else None, max_queue=max_queue,
        asks=True, documents=True, usage=remote_usage, on_release=on_release,
    )  # fmt: skip


def dragon_served(
    model: Any,
    corpus: Any,
    *,
    name: str | None = None,
    cloud: Any = None,
    channel: Any = None,
    max_queue: int = 64,
    **knobs: Any,
) -> Served:
    """DRAGON on the device ``model`` with its ``corpus``, with the cloud of ``cloud`` (a
    ``CloudLink``; None: the device alone) over ``channel``, kept for every request: each
    chat's last user message is the question. ``knobs``: ``DragonConfig``'s other fields."""
    from coinfer.engines import dragon

    def run(
        request: ServeRequest, prompt: list[int], sampling: SamplingParams
    ) -> Generator[Response, None, None]:
        question = request.question()
        config = dragon.DragonConfig(max_tokens=request.max_tokens, sampling=sampling, **knobs)

        def documents() -> list[Any]:
            return list(corpus.retrieve(question, config.top_k, how=config.retrieval,
                                        temperature=config.relevance_temperature))  # fmt: skip

        rescore = corpus.rescorer(question, temperature=config.relevance_temperature)
        return dragon.stream(model, question, documents=documents, config=config, cloud=cloud,
                             channel=channel, rescore=rescore)  # fmt: skip

    return EngineServed(
        name or model.name, "dragon", model, run, max_queue=max_queue, asks=True,
        on_release=channel.close if channel is not None else None,
    )  # fmt: skip


def jupiter_served(
    cluster: Any,
    *,
    name: str,
    decode: str = "naive",
    max_queue: int = 64,
    on_release: Any = None,
    **knobs: Any,
) -> Served:
    """Jupiter over a started ``EdgeCluster`` (its devices joined), one request at a time.
    ``decode``: naive or sd continue the chat in the model's template; outline and auto
    answer its last user message (with its system message) by outline decoding, when the
    router finds a list. ``knobs``: ``JupiterConfig``'s other fields."""
    from coinfer.engines import jupiter

    def run(
        request: ServeRequest, prompt: list[int], sampling: SamplingParams
    ) -> Generator[Response, None, None]:
        room = cluster.n_ctx - len(prompt)
        config = jupiter.JupiterConfig(max_tokens=min(request.max_tokens, max(room, 1)), sampling=sampling,
                                       decode=decode, **knobs)  # fmt: skip
        if decode in ("outline", "auto"):
            system = next((m["content"] for m in request.messages or [] if m["role"] == "system"), None)
            return jupiter.stream(cluster, request.question(), config=config, system=system)
        return jupiter.stream(cluster, prompt, config=config)

    return EngineServed(
        name, "jupiter", cluster.text, run, max_queue=max_queue, asks=decode in ("outline", "auto"),
        draft="heads" if cluster.heads is not None else None, on_release=on_release,
    )  # fmt: skip
