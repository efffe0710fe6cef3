"""OpenAI request bodies, checked by pydantic: a bad body becomes one ``ConfigError`` that
names the field (the server's 400), a good one a ``ServeRequest``.

Fields OpenAI defines that coinfer does not act on (``user``, ``metadata``, ``store`` …)
are accepted and ignored, as other OpenAI-compatible servers do, except where ignoring
them would change the answer silently, and those are refused with a 400 that names them:
``logprobs``, the older ``functions`` unless ``tool_choice`` is ``none`` (send them as
``tools``), a non-zero ``presence_penalty`` or ``frequency_penalty``, a ``logit_bias``, a
completion's ``suffix`` or ``best_of`` above 1, ``n`` above ``MAX_N``, an unknown
``response_format``.

``tools`` (with ``tool_choice`` ``auto``, ``required`` or one function, and
``parallel_tool_calls``) become the request's ``Tools`` (``serve.tool_calls``); a
``tool_choice`` of ``none`` leaves them out of the prompt. Assistant messages may carry
``tool_calls`` (their ``arguments`` read from JSON, as chat templates take them) and
``tool`` messages the results.

A chat body may carry ``documents`` (coinfer's own field: ``[{"name": …, "text": …}]``;
``extra_body`` in OpenAI's client): what the Minion/MinionS engines read locally.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from coinfer.chat.base import ChatRequest
from coinfer.chat.tools import MAX_TOOLS, Tools, call_arguments_as
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


class _Function(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None


class _Tool(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Literal["function"]
    function: _Function


class _CalledFunction(BaseModel):
    name: str = Field(min_length=1)
    arguments: str | dict[str, Any]

    def argument_object(self) -> dict[str, Any]:
        """The arguments as an object (OpenAI sends JSON text; chat templates take objects)."""
        if isinstance(self.arguments, dict):
            return self.arguments
        try:
            value = json.loads(self.arguments or "{}")
        except json.JSONDecodeError:
            value = None
        if not isinstance(value, dict):
            raise ConfigError(f"messages: the arguments of a call to {self.name} are not a JSON object")
        return value


class _ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str | None = None
    type: Literal["function"] = "function"
    function: _CalledFunction


class _Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None

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

    def as_template_message(self) -> dict[str, Any]:
        """The message as chat templates take it: text content, a developer as a system,
        calls with their arguments as objects."""
        role = "system" if self.role == "developer" else self.role
        out: dict[str, Any] = {"role": role, "content": self.text()}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.argument_object()}}
                for c in self.tool_calls
            ]  # fmt: skip
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


class _Document(BaseModel):
    name: str = Field(min_length=1, max_length=256)
    text: str = Field(min_length=1)


class ChatBody(_Body):
    messages: list[_Message] = Field(min_length=1)
    documents: list[_Document] | None = Field(None, min_length=1, max_length=MAX_DOCUMENTS)
    max_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    max_completion_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    response_format: dict[str, Any] | None = None
    tools: list[_Tool] | None = Field(None, max_length=MAX_TOOLS)
    functions: list[Any] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None

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

    def refuse_functions(self) -> None:
        """The older ``functions`` are refused unless none is to be called: coinfer reads
        calls back as ``tool_calls``, which a client that sent ``functions`` does not read."""
        if self.functions and self.tool_choice != "none":
            raise ConfigError("functions: coinfer calls tools, not the older functions",
                              hint='send them as tools, or send tool_choice "none"')  # fmt: skip

    def request_tools(self) -> Tools | None:
        """The tools the model is to be told of, and how it must call them; None without
        tools or with ``tool_choice`` ``none``."""
        choice = "auto" if self.tool_choice is None else self.tool_choice  # OpenAI's default with tools
        if choice == "none" or not self.tools:
            if choice not in ("none", "auto"):
                raise ConfigError("tool_choice: there are no tools to call", hint="send tools, or leave it")
            return None
        specs = tuple(t.model_dump(exclude_none=True) for t in self.tools)
        names = [t.function.name for t in self.tools]
        if isinstance(choice, dict):
            name = (choice.get("function") or {}).get("name") if choice.get("type") == "function" else None
            if name not in names:
                raise ConfigError(
                    f"tool_choice: names no declared tool (tools: {', '.join(names)})",
                    hint='send {"type": "function", "function": {"name": ...}} with a name from tools',
                )
            choice = name
        elif choice not in ("auto", "required"):
            raise ConfigError(
                "tool_choice: must be none, auto, required or a function",
                hint='send {"type": "function", "function": {"name": ...}} to force one',
            )
        return Tools(specs, str(choice), parallel=self.parallel_tool_calls is not False)


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
    messages: list[dict[str, Any]] | None
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
    tools: Tools | None = None  # what the model is told it may call (a chat's)

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
            messages=call_arguments_as(self.messages, text=True), n=self.n, max_tokens=self.max_tokens,
            temperature=self.temperature, json_schema=self.json_schema, seed=self.seed, tools=self.tools,
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
    b.refuse_functions()
    tools = b.request_tools()
    schema = _reply_schema(b.response_format or {}, tools)
    budget = b.max_completion_tokens or b.max_tokens or default_max_tokens
    messages = [m.as_template_message() for m in b.messages]
    documents = tuple((d.name, d.text) for d in b.documents) if b.documents else None
    return ServeRequest(
        messages=messages, prompt=None, json_schema=schema, documents=documents, tools=tools,
        **_common(b, budget),
    )  # fmt: skip


def _reply_schema(fmt: dict[str, Any], tools: Tools | None) -> dict[str, Any] | None:
    """The JSON schema the reply must follow: ``response_format``'s, or a forced tool
    call's (``tool_choice`` ``required`` or a function); not both."""
    forced = tools.forced_schema() if tools is not None else None
    if fmt.get("type") in ("json_schema", "json_object"):
        if forced is not None:
            raise ConfigError(
                "response_format: a reply cannot both follow a schema and be a forced tool call",
                hint='send tool_choice "auto", or leave response_format out',
            )
        return fmt["json_schema"]["schema"] if fmt["type"] == "json_schema" else {"type": "object"}
    return forced


def parse_chat_body(data: Any) -> ChatRequest:
    """A ``ChatRequest`` from an OpenAI chat-completions body; ``ConfigError`` names the field."""
    return read_body("chat", data).chat_request()
