"""The black-box chat contract: messages in; texts, finish reasons and token usage out.

A ``ChatModel`` answers a ``ChatRequest`` (messages, ``n`` samples, a token budget,
temperature, optionally a JSON schema the reply must follow) with a ``ChatResult``, and
answers a batch of independent requests with ``chat_batch`` (concurrently, where the
implementation can). Every call reports its ``Usage``, so a protocol can count prefill
(input) and decode (output) tokens per side and per round. A steerable model can always
be wrapped as a chat model (``LocalChat``), never the reverse.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coinfer.chat.tools import ToolCall, Tools, call_arguments_as
from coinfer.errors import ConfigError
from coinfer.models.chat_template import Message, check_messages

if TYPE_CHECKING:
    from coinfer.models.base import Prompter

__all__ = ["ChatModel", "ChatRequest", "ChatResult", "Usage"]


@dataclass(frozen=True)
class Usage:
    """Tokens a model read (prefill) and wrote (decode), over ``calls`` calls.

    ``estimated`` is true when a server did not report usage and it was estimated from
    the text (about four characters a token), so a bill is never silently low.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    estimated: bool = False
    cached_tokens: int = 0  # of the prompt tokens, those read from a cache of an earlier request

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.calls + other.calls,
            self.estimated or other.estimated,
            self.cached_tokens + other.cached_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int | bool]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "calls": self.calls,
            "estimated": self.estimated,
        }


@dataclass(frozen=True)
class ChatRequest:
    """One conversation to continue; ``n`` independent samples of the reply."""

    messages: Sequence[Message]
    n: int = 1
    max_tokens: int = 512
    temperature: float = 0.0
    json_schema: Mapping[str, Any] | None = None  # the reply must be JSON following it
    seed: int | None = None
    tools: Tools | None = None  # the model may answer with calls of these (``ChatResult.tool_calls``)

    def __post_init__(self) -> None:
        check_messages(self.messages)
        if self.n < 1 or self.max_tokens < 1 or self.temperature < 0:
            raise ConfigError(
                f"a chat request needs n >= 1, max_tokens >= 1 and temperature >= 0 "
                f"(got {self.n}, {self.max_tokens}, {self.temperature})"
            )
        if self.tools is not None and self.tools.forces and self.json_schema is not None:
            raise ConfigError(
                "a reply cannot both follow a schema and be a forced tool call",
                hint='give json_schema or a forcing tool choice, or let tools.choice be "auto"',
            )

    def prompt(self, model: Prompter) -> list[int]:
        """The messages through ``model``'s chat template, with the tools (a template that
        takes none refuses them: the model would answer in text where calls are awaited)."""
        messages = call_arguments_as(self.messages, text=False)
        if self.tools is None:
            return model.chat_prompt(messages)
        return model.chat_prompt(messages, tools=self.tools.specs)

    @property
    def reply_schema(self) -> Mapping[str, Any] | None:
        """The schema a reply must follow: ``json_schema``, or a forced call's."""
        return (
            self.tools.forced_schema() if self.tools is not None and self.tools.forces else self.json_schema
        )


@dataclass(frozen=True)
class ChatResult:
    """The ``n`` replies, why each ended (``stop``, ``length``, or ``tool_calls``), what
    they cost, and each reply's tool calls (none unless the request gave ``tools``; a
    reply with calls has the text before them, often empty, as its text)."""

    texts: list[str]
    finish_reasons: list[str]
    usage: Usage = field(default_factory=Usage)
    tool_calls: list[list[ToolCall]] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.texts[0]

    @property
    def calls(self) -> list[ToolCall]:
        """The first reply's tool calls."""
        return self.tool_calls[0] if self.tool_calls else []

    @classmethod
    def read(cls, texts: list[str], reasons: list[str], usage: Usage, tools: Tools | None) -> ChatResult:
        """The result of replies written as text: with ``tools``, each reply that is calls
        (``Tools.read``) becomes its content and calls, ``tool_calls`` its finish reason."""
        if tools is None:
            return cls(texts, reasons, usage)
        read = [tools.read(t) for t in texts]
        return cls(
            [content or "" for content, _ in read],  # the whole text where there are no calls
            ["tool_calls" if calls else r for (_, calls), r in zip(read, reasons, strict=True)],
            usage,
            [calls for _, calls in read],
        )


class ChatModel(ABC):
    """Anything that chats: a remote API, a local model."""

    name: str = "chat-model"

    @abstractmethod
    def chat(self, request: ChatRequest) -> ChatResult:
        """Answer one request."""

    def chat_batch(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        """Answer independent requests; implementations run them concurrently."""
        return [self.chat(r) for r in requests]

    def close(self) -> None:  # noqa: B027 - most models hold nothing to free
        """Free what the model holds (a server process, a loaded model)."""

    def __enter__(self) -> ChatModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def estimate_tokens(text: str) -> int:
    """About four characters a token: only where a server reports no usage."""
    return max(1, (len(text) + 3) // 4) if text else 0
