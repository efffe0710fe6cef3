"""Any OpenAI-compatible chat API through the official ``openai`` client.

Covers OpenAI itself and every server that speaks its chat-completions API: vLLM,
Ollama, llama.cpp's server, LM Studio, Together… The base URL and key come from the
arguments or the environment (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``); a server on
loopback needs no key. Errors are translated at this boundary: a server that cannot be
reached after the client's bounded retries is a ``TransportError`` that says where it
looked. Usage is taken from every response; a server that reports none gets an estimate
marked as such, and a server that returns fewer than ``n`` choices is asked again until
there are ``n``, every call counted.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from coinfer.chat.base import ChatModel, ChatRequest, ChatResult, Usage, estimate_tokens
from coinfer.chat.tools import ToolCall, call_arguments_as
from coinfer.errors import ConfigError, MissingDependencyError, TransportError

__all__ = ["OpenAIChat"]


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise MissingDependencyError("the openai client", "remote") from exc
    return openai


class OpenAIChat(ChatModel):
    """Chat through an OpenAI-compatible endpoint; ``chat_batch`` sends up to
    ``concurrency`` requests at once."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        max_retries: int = 2,
        concurrency: int = 8,
    ) -> None:
        self._openai = _import_openai()
        self.name = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if "api.openai.com" in self.base_url:
                raise ConfigError(
                    "no API key for the OpenAI API",
                    hint="set OPENAI_API_KEY, or point --remote-base-url at another server",
                )
            key = "no-key"  # local servers accept anything
        self.max_retries, self.concurrency = max_retries, concurrency
        self._client = self._openai.OpenAI(
            base_url=self.base_url, api_key=key, timeout=timeout_s, max_retries=max_retries
        )

    def chat(self, request: ChatRequest) -> ChatResult:
        texts: list[str] = []
        reasons: list[str] = []
        calls: list[list[ToolCall]] = []
        usage = Usage()
        while len(texts) < request.n:
            response = self._create(request, request.n - len(texts))
            usage = usage + self._usage(response, request)
            for choice in sorted(response.choices, key=lambda c: c.index):
                texts.append(choice.message.content or "")
                calls.append(_calls(choice.message))
                reasons.append(_finish(choice.finish_reason, calls[-1]))
            if not response.choices:
                raise TransportError(f"{self.name} at {self.base_url} returned no choices")
        n = request.n
        return ChatResult(texts[:n], reasons[:n], usage, calls[:n] if request.tools is not None else [])

    def chat_batch(self, requests: Sequence[ChatRequest]) -> list[ChatResult]:
        if len(requests) <= 1:
            return [self.chat(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
            return list(pool.map(self.chat, requests))

    def _create(self, request: ChatRequest, n: int) -> Any:
        kwargs: dict[str, Any] = {
            "model": self.name,
            "messages": call_arguments_as(request.messages, text=True),
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if n > 1:
            kwargs["n"] = n
        if request.seed is not None:
            kwargs["seed"] = request.seed
        if request.tools is not None:  # the API forces a call itself: no schema of ours
            kwargs["tools"] = [dict(t) for t in request.tools.specs]
            kwargs["tool_choice"] = _tool_choice(request.tools.choice)
            if not request.tools.parallel:
                kwargs["parallel_tool_calls"] = False
        if request.json_schema is not None:
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "reply", "schema": dict(request.json_schema)},
            }
        oa = self._openai
        try:
            return self._client.chat.completions.create(**kwargs)
        except oa.AuthenticationError as exc:
            raise ConfigError(
                f"{self.base_url} refused the API key", hint="set OPENAI_API_KEY to a valid key"
            ) from exc
        except (oa.APIConnectionError, oa.APITimeoutError) as exc:
            raise TransportError(
                f"could not reach the remote model {self.name} at {self.base_url} "
                f"after {self.max_retries} retries ({exc})",
                hint="check that the server is up and that --remote-base-url points at it",
            ) from exc
        except oa.APIStatusError as exc:
            raise TransportError(
                f"the remote model {self.name} at {self.base_url} answered HTTP {exc.status_code}: "
                f"{str(exc)[:300]}",
                hint="check the model name and the request limits of the server",
            ) from exc

    @staticmethod
    def _usage(response: Any, request: ChatRequest) -> Usage:
        u = getattr(response, "usage", None)
        if u is not None and u.prompt_tokens is not None:
            return Usage(int(u.prompt_tokens), int(u.completion_tokens or 0), calls=1)
        prompt = sum(estimate_tokens(str(m.get("content", ""))) for m in request.messages)
        completion = sum(estimate_tokens(c.message.content or "") for c in response.choices)
        return Usage(prompt, completion, calls=1, estimated=True)


def _tool_choice(choice: str) -> str | dict[str, Any]:
    """``Tools.choice`` as OpenAI's ``tool_choice``."""
    return choice if choice in ("auto", "required") else {"type": "function", "function": {"name": choice}}


def _calls(message: Any) -> list[ToolCall]:
    """A reply message's tool calls as ``ToolCall`` (the API's own ids kept)."""
    return [
        ToolCall(str(c.function.name), str(c.function.arguments), id=str(c.id))
        for c in getattr(message, "tool_calls", None) or []
        if getattr(c, "function", None) is not None
    ]


def _finish(reason: str | None, calls: list[ToolCall]) -> str:
    return "tool_calls" if calls else "length" if reason == "length" else "stop"
