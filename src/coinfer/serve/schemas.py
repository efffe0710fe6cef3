"""OpenAI request bodies, checked by pydantic: a bad body becomes one ``ConfigError`` that
names the field (the server's 400), a good one a ``ServeRequest``.

Fields OpenAI defines that coinfer does not act on (``user``, ``metadata``, ``store`` …)
are accepted and ignored, as other OpenAI-compatible servers do, except where ignoring
them would change the answer silently, and those are refused with a 400 that names them:
``logprobs``, ``tools`` (and the older ``functions``) unless ``tool_choice`` is ``none``
(a model never told of the tools answers in text, and an agent takes that for its final
answer; ``llama-server`` without ``--jinja`` refuses them too), a non-zero
``presence_penalty`` or ``frequency_penalty``, a ``logit_bias``, a completion's ``suffix``
or ``best_of`` above 1, ``n`` above ``MAX_N``, an unknown ``response_format``.

A chat body may carry ``documents`` (coinfer's own field: ``[{"name": …, "text": …}]``;
``extra_body`` in OpenAI's client): what the Minion/MinionS engines read locally.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from coinfer.chat.base import ChatRequest
from coinfer.errors import ConfigError

__all__ = [
    "MAX_N",
    "MAX_STOPS",
    "ChatBody",
    "CompletionBody",
    "ServeRequest",
    "parse_chat_body",
    "read_body",
]

MAX_N = 8  # samples per request
MAX_STOPS = 4  # stop strings per request, as OpenAI allows
MAX_TOKENS = 1 << 20  # a request's budget; each model's window caps it further
MAX_DOCUMENTS = 64  # documents per request (the body's byte cap bounds their text)


# fields coinfer does not act on and that would change the answer if ignored: refused when
# set to anything but nothing, zero, false or empty
_REFUSED = {
    "logprobs": "coinfer does not return logprobs; leave it out",
    "presence_penalty": "coinfer does not apply penalties; leave it out or send 0",
    "frequency_penalty": "coinfer does not apply penalties; leave it out or send 0",
    "logit_bias": "coinfer does not bias logits; leave it out",
    "suffix": "coinfer does not fill in between a prompt and a suffix; leave it out",
    "echo": "coinfer does not echo the prompt; leave echo out",
}


def _refused_if_set(value: Any, info: ValidationInfo) -> Any:
    if value:
        raise ValueError(_REFUSED[str(info.field_name)])
    return value


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None
    stop: str | list[str] | None = None
    logprobs: bool | int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, Any] | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > MAX_STOPS or any(not s for s in stops):
            raise ValueError(f"at most {MAX_STOPS} stop strings, none empty")
        return value

    @field_validator("logprobs", "presence_penalty", "frequency_penalty", "logit_bias")
    @classmethod
    def _not_acted_on(cls, value: Any, info: ValidationInfo) -> Any:
        return _refused_if_set(value, info)


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The text of the message; content parts other than text are refused."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        parts = []
        for part in self.content:
            if part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ConfigError("messages: only text content parts are served", hint="send the text alone")
            parts.append(part["text"])
        return "".join(parts)


class _Document(BaseModel):
    name: str = Field(min_length=1, max_length=256)
    text: str = Field(min_length=1)


class ChatBody(_Body):
    messages: list[_Message] = Field(min_length=1)
    documents: list[_Document] | None = Field(None, min_length=1, max_length=MAX_DOCUMENTS)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    functions: list[Any] | None = None
    tool_choice: Any = None

    @field_validator("response_format")
    @classmethod
    def _format(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and value.get("type") not in ("text", "json_schema", "json_object"):
            raise ValueError("type must be text, json_object or json_schema")
        if value is not None and value.get("type") == "json_schema":
            spec = value.get("json_schema")
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise ValueError("json_schema.schema must be a JSON schema object")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tools(cls, value: Any) -> Any:
        if value not in (None, "none", "auto"):
            raise ValueError("coinfer does not call tools; leave tool_choice out")
        return value

    def refuse_tools(self) -> None:
        """Tools the model would be asked to call are refused: coinfer does not tell a model
        of them, so it would answer in text where the client awaits a call."""
        if (self.tools or self.functions) and self.tool_choice != "none":
            field = "tools" if self.tools else "functions"
            raise ConfigError(
                f"{field}: coinfer does not call tools", hint=f'leave {field} out, or send tool_choice "none"'
            )


class CompletionBody(_Body):
    prompt: str = Field(min_length=1)
    max_tokens: int = Field(16, ge=1, le=MAX_TOKENS)  # OpenAI's default for completions
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = None

    @field_validator("suffix", "echo")
    @classmethod
    def _not_acted_on_here(cls, value: Any, info: ValidationInfo) -> Any:
        return _refused_if_set(value, info)

    @field_validator("best_of")
    @classmethod
    def _no_best_of(cls, value: int | None) -> int | None:
        if value is not None and value != 1:
            raise ValueError("coinfer does not pick the best of several samples; leave it out, or ask for n")
        return value


@dataclass(frozen=True)
class ServeRequest:
    """One request as the served models take it: a chat (``messages``) or a completion
    (``prompt``, read as plain text)."""

    model: str | None
    messages: list[dict[str, str]] | None
    prompt: str | None
    n: int
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    json_schema: dict[str, Any] | None = None
    documents: tuple[tuple[str, str], ...] | None = None  # (name, text)

    def question(self) -> str:
        """The chat's last user message: what a question-answering engine answers."""
        users = [m["content"] for m in self.messages or [] if m["role"] == "user"]
        if not users or not users[-1].strip():
            raise ConfigError("messages: the last user message is the question, and there is none")
        return users[-1]

    @property
    def kind(self) -> str:
        return "chat" if self.messages is not None else "completion"

    def chat_request(self) -> ChatRequest:
        """As the black-box chat contract's request (served by a ``ChatModel``)."""
        if self.messages is None:
            raise ConfigError("this model serves chat completions only", hint="POST /v1/chat/completions")
        return ChatRequest(
            messages=self.messages, n=self.n, max_tokens=self.max_tokens, temperature=self.temperature,
            json_schema=self.json_schema, seed=self.seed,
        )  # fmt: skip


def _field_error(exc: ValidationError) -> ConfigError:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "body"
    return ConfigError(f"{where}: {first.get('msg', 'is not valid')}")


def _common(body: _Body, max_tokens: int) -> dict[str, Any]:
    stops = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    return {
        "model": body.model, "n": body.n, "max_tokens": max_tokens,
        "temperature": 1.0 if body.temperature is None else body.temperature,
        "top_p": 1.0 if body.top_p is None else body.top_p, "seed": body.seed, "stop": stops,
        "stream": body.stream, "include_usage": bool((body.stream_options or {}).get("include_usage")),
    }  # fmt: skip


def read_body(kind: str, data: Any, *, default_max_tokens: int = 512) -> ServeRequest:
    """A ``ServeRequest`` from a decoded JSON body of ``kind`` ``chat`` or ``completion``."""
    if not isinstance(data, dict):
        raise ConfigError("the body must be a JSON object")
    try:
        if kind == "completion":
            c = CompletionBody.model_validate(data)
            return ServeRequest(messages=None, prompt=c.prompt, **_common(c, c.max_tokens))
        b = ChatBody.model_validate(data)
    except ValidationError as exc:
        raise _field_error(exc) from None
    b.refuse_tools()
    fmt = b.response_format or {}
    schema: dict[str, Any] | None = None
    if fmt.get("type") == "json_schema":
        schema = fmt["json_schema"]["schema"]
    elif fmt.get("type") == "json_object":
        schema = {"type": "object"}
    budget = b.max_completion_tokens or b.max_tokens or default_max_tokens
    messages = [
        {"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in b.messages
    ]
    documents = tuple((d.name, d.text) for d in b.documents) if b.documents else None
    return ServeRequest(
        messages=messages, prompt=None, json_schema=schema, documents=documents, **_common(b, budget)
    )


def parse_chat_body(data: Any) -> ChatRequest:
    """A ``ChatRequest`` from an OpenAI chat-completions body; ``ConfigError`` names the field."""
    return read_body("chat", data).chat_request()
