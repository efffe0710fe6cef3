"""The engine contract: every engine is an ``Engine`` that opens ``Session`` objects.

    engine = coinfer.engines.get("llmcad")              # the registry (registry.py)
    with engine.open({"target": big, "draft": small}, LLMCadConfig()) as session:
        for response in session.stream(Request(prompt=ids)):
            ...

An ``Engine`` names itself, its ``Config`` type (a frozen keyword-only dataclass of the
paper's knobs, checked in ``__post_init__``), the ``parts`` it is built from (models,
drafters, a corpus, a remote, a cluster: by role) and its capabilities as attributes. Its
``open`` checks the parts and the config and returns a ``Session``, which answers
``Request`` objects with a stream of ``Response`` objects and owns what the engine learns
while it runs (``Learned``: cost curves, gate memory, judges, document caches). Sessions
that should learn together are given one ``Learned``; otherwise each has its own.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar, Protocol

from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import Response, collect
from coinfer.decoding.sampling import SamplingParams
from coinfer.errors import ConfigError

__all__ = ["Arrivals", "BatchSession", "Engine", "Request", "Session"]


@dataclass(frozen=True, kw_only=True)
class Request:
    """One request to a session.

    ``prompt``: token ids in the session's model's format (engines that continue a text);
    ``question`` and ``system``: the user's question as text (engines that answer one:
    they build their own prompts; a continuing engine given only a question puts it in
    its model's chat template); ``documents``: ``(name, text)`` pairs the request brings;
    ``max_tokens`` and ``sampling``: this request's, in place of the config's (None: the
    config's)."""

    prompt: Sequence[int] = ()
    question: str | None = None
    system: str | None = None
    documents: Sequence[tuple[str, str]] = ()
    max_tokens: int | None = None
    sampling: SamplingParams | None = None


class Session(ABC):
    """An engine opened over its parts: answers requests; owns what the engine learns.

    ``model``: the steerable model whose tokens the responses carry (None where an engine
    answers in text only, as the local-remote protocols do)."""

    model: Any = None

    @property
    def answers(self) -> bool:
        """Whether it answers a request's question (True) or continues its prompt."""
        return self.engine.answers

    @property
    def draft_label(self) -> str | None:
        """What drafts for it, as a trace names it (None: nothing drafts)."""
        return None

    @property
    def window(self) -> int | None:
        """Tokens a prompt and its answer may hold together (None: the engine's own limit)."""
        return None if self.model is None else int(self.model.n_ctx)

    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        self.engine, self.parts, self.config, self.learned = engine, dict(parts), config, learned

    def speculator(self) -> BatchSpeculator | None:
        """What drafts inside a server's continuous batch of this session's target (the
        batch of plain decoding's steps: ``chat.LocalChat``), one per session; None where
        the engine does not speculate that way."""
        return None

    @abstractmethod
    def stream(self, request: Request) -> Generator[Response, None, None]:
        """One ``Response`` per step; the last carries the finish reason."""

    def generate(self, request: Request) -> Response:
        """The whole answer: one ``Response`` with every token and the whole text."""
        return collect(self.stream(request), None if self.model is None else self.model.detokenize)

    def configured(self, request: Request) -> Any:
        """The session's config with the request's budget and sampling, where it has them."""
        names = {f.name for f in dataclasses.fields(self.config)}
        changes: dict[str, Any] = {}
        if request.max_tokens is not None and "max_tokens" in names:
            changes["max_tokens"] = request.max_tokens
        if request.sampling is not None and "sampling" in names:
            changes["sampling"] = request.sampling
        return dataclasses.replace(self.config, **changes) if changes else self.config

    def prompt_of(self, request: Request) -> list[int]:
        """The request's token ids, or its question in the model's chat template."""
        if request.prompt:
            return [int(t) for t in request.prompt]
        if request.question is None or self.model is None:
            raise ConfigError(f"a {self.engine.name} request needs a prompt", hint="pass Request(prompt=ids)")
        ids: list[int] = self.model.user_prompt(request.question, system=request.system)
        return ids

    def question_of(self, request: Request) -> str:
        """The request's question (engines that answer one)."""
        if not request.question:
            raise ConfigError(
                f"{self.engine.name} answers a question",
                hint="pass Request(question=...), a chat's last message",
            )
        return request.question

    def concurrent(self) -> int:
        """How many requests ``stream`` may answer at once, each on its own thread (a
        session whose parts share one batch across threads: MinionS's ``SharedChat``,
        LLMCad's and DRAGON's ``SharedModel``); 1: one at a time."""
        return 1

    def billed(self, last: Response) -> dict[str, Any] | None:
        """What the request cost where someone bills for it (a remote's usage:
        ``prompt_tokens``, ``completion_tokens``); None: the model's own tokens."""
        return None

    def close(self) -> None:
        """Free what the session holds (its learned state's sequences; its own parts)."""
        self.learned.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class Arrivals(Protocol):
    """Requests that join or leave a running batch (polled before each of its steps)."""

    def joined(self) -> list[tuple[int, list[int], int]]:
        """New requests: (key, prompt ids, token budget); keys unique within the run."""
        ...

    def left(self) -> set[int]:
        """Keys of requests to end now (their callers went away or have what they need)."""
        ...


class BatchSession(Session):
    """A session whose requests can join one running batch between its steps and leave it
    when done (continuous batching); ``batching`` says whether its config allows it."""

    @property
    def batching(self) -> bool:
        return True

    @abstractmethod
    def run(self, arrivals: Arrivals, sampling: SamplingParams) -> Iterator[Response]:
        """Responses as the batch advances, each ``request`` the key it joined with; the
        batch samples as ``sampling`` says, each request within its own budget."""


class Engine:
    """A paper's engine: its name, its ``Session`` type, config, parts, capabilities, and
    ``open``.

    Capabilities: ``batches`` (it decodes several requests in one batch), ``needs_documents``
    (each request brings documents), ``needs_remote`` (a remote model or a cloud takes part),
    ``lossless`` (its greedy output is the target's alone, with the default config),
    ``answers`` (it answers a request's ``question`` rather than continuing its prompt)."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    session_type: ClassVar[type[Session]]
    config_type: ClassVar[type[Any]]
    config_types: ClassVar[tuple[type[Any], ...]] = ()  # others it takes (a protocol per config)
    parts: ClassVar[tuple[str, ...]] = ("target",)
    optional_parts: ClassVar[tuple[str, ...]] = ()
    batches: ClassVar[bool] = False
    needs_documents: ClassVar[bool] = False
    needs_remote: ClassVar[bool] = False
    lossless: ClassVar[bool] = False
    answers: ClassVar[bool] = False

    def config(self, **knobs: Any) -> Any:
        """The engine's config from keyword knobs (a bad knob: ``ConfigError``)."""
        try:
            return self.config_type(**knobs)
        except TypeError as exc:
            known = ", ".join(f.name for f in dataclasses.fields(self.config_type))
            raise ConfigError(f"{self.name}: {exc}", hint=f"its knobs: {known}") from exc

    def config_from(self, knobs: Mapping[str, Any]) -> Any:
        """The config from those of ``knobs`` that are its fields: a front end (the CLI)
        gathers every engine's knobs from its flags, and each engine takes its own."""
        names = {f.name for f in dataclasses.fields(self.config_type)}
        return self.config(**{k: v for k, v in knobs.items() if k in names})

    def open(
        self, parts: Mapping[str, Any], config: Any = None, *, learned: Learned | None = None
    ) -> Session:
        """A session over ``parts`` (by role: ``self.parts`` and any of ``optional_parts``)."""
        config = self.config_type() if config is None else config
        self.check_config(config)
        self.check_parts(parts)
        return self.session(parts, config, Learned() if learned is None else learned)

    def session(self, parts: Mapping[str, Any], config: Any, learned: Learned) -> Session:
        """The engine's session (parts and config checked): a ``session_type``."""
        return self.session_type(self, parts, config, learned)

    def check_config(self, config: Any) -> None:
        if not isinstance(config, (self.config_type, *self.config_types)):
            raise ConfigError(
                f"{self.name} takes a {self.config_type.__name__}, not a {type(config).__name__}",
                hint=f"engine.config(...) builds one; or {self.config_type.__name__}(...)",
            )

    def check_parts(self, parts: Mapping[str, Any]) -> None:
        missing = [p for p in self.parts if parts.get(p) is None]
        unknown = sorted(set(parts) - set(self.parts) - set(self.optional_parts))
        if missing or unknown:
            wants = ", ".join(self.parts + tuple(f"[{p}]" for p in self.optional_parts))
            said = f"missing {', '.join(missing)}" if missing else f"no part named {', '.join(unknown)}"
            raise ConfigError(f"{self.name}: {said}", hint=f"its parts: {wants}")
