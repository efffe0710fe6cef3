"""An OpenAI-compatible chat-completions server over any ``ChatModel``.

``ChatServer(model).start()`` listens on loopback (unless told another host) and answers
``POST /v1/chat/completions`` (non-streaming) and ``GET /v1/models`` the way OpenAI's API
does, usage included, so the official client and every tool built on it work unchanged.
Requests that arrive together are answered together: one worker thread takes every
request waiting in the queue (up to ``max_batch``) and hands them to ``chat_batch``, so
a local model decodes concurrent requests in one batch. Bodies are JSON, checked field by
field; a bad request gets HTTP 400 with an OpenAI-style error object.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from coinfer.chat.base import ChatModel, ChatRequest, ChatResult
from coinfer.errors import CoinferError, ConfigError, ContextOverflowError

__all__ = ["ChatServer", "parse_chat_body"]

MAX_BODY = 64 << 20  # bytes


def parse_chat_body(body: dict[str, Any]) -> ChatRequest:
    """A ``ChatRequest`` from an OpenAI chat-completions body; ``ConfigError`` says what is wrong."""
    if not isinstance(body, dict):
        raise ConfigError("the body must be a JSON object")
    if body.get("stream"):
        raise ConfigError("streaming is not supported by this server; send stream=false")
    messages = body.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ConfigError("'messages' must be a list of {role, content} objects")
    fmt = body.get("response_format") or {}
    schema = None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        schema = (fmt.get("json_schema") or {}).get("schema")
    try:
        return ChatRequest(
            messages=[{"role": m.get("role"), "content": m.get("content")} for m in messages],
            n=int(body.get("n") or 1),
            max_tokens=int(body.get("max_completion_tokens") or body.get("max_tokens") or 512),
            temperature=float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0),
            json_schema=schema,
            seed=None if body.get("seed") is None else int(body["seed"]),
        )
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"a field has the wrong type: {exc}") from exc


def completion_body(model: str, result: ChatResult) -> dict[str, Any]:
    """The OpenAI response object for a result."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": text}, "finish_reason": reason}
            for i, (text, reason) in enumerate(zip(result.texts, result.finish_reasons, strict=True))
        ],
        "usage": {
            "prompt_tokens": result.usage.prompt_tokens,
            "completion_tokens": result.usage.completion_tokens,
            "total_tokens": result.usage.total_tokens,
        },
    }


class ChatServer:
    """Serve ``model`` over HTTP; ``start()`` returns once it listens, ``url`` is its base URL."""

    def __init__(
        self, model: ChatModel, *, host: str = "127.0.0.1", port: int = 0, max_batch: int = 8
    ) -> None:
        self.model = model
        self.max_batch = max_batch
        self._queue: queue.Queue[tuple[ChatRequest, Future[ChatResult]] | None] = queue.Queue()
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> ChatServer:
        self._threads = [
            threading.Thread(target=self._httpd.serve_forever, daemon=True),
            threading.Thread(target=self._work, daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._queue.put(None)
        for t in self._threads:
            t.join(timeout=10)

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def submit(self, request: ChatRequest) -> ChatResult:
        """Queue a request for the batching worker and wait for its result."""
        done: Future[ChatResult] = Future()
        self._queue.put((request, done))
        return done.result()

    def _work(self) -> None:
        """Answer whatever is queued, together, until stopped."""
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._queue.put(None)
                    break
                batch.append(item)
            self._answer(batch)

    def _answer(self, batch: list[tuple[ChatRequest, Future[ChatResult]]]) -> None:
        try:
            results = self.model.chat_batch([r for r, _ in batch])
        except BaseException as exc:  # noqa: BLE001 - every waiting request learns of the failure
            for _, done in batch:
                done.set_exception(exc)
            return
        for (_, done), result in zip(batch, results, strict=True):
            done.set_result(result)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                return None  # quiet: the caller reports what matters

            def do_GET(self) -> None:  # noqa: N802 - the base's name
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    model = {"id": server.model.name, "object": "model", "owned_by": "coinfer"}
                    self._send(200, {"object": "list", "data": [model]})
                else:
                    self._send(404, _error(f"no route {self.path}", "not_found"))

            def do_POST(self) -> None:  # noqa: N802 - the base's name
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._send(404, _error(f"no route {self.path}", "not_found"))
                    return
                try:
                    request = parse_chat_body(self._body())
                    result = server.submit(request)
                except (ConfigError, ContextOverflowError, ValueError) as exc:
                    self._send(400, _error(str(exc), "invalid_request_error"))
                except CoinferError as exc:
                    self._send(500, _error(str(exc), "server_error"))
                else:
                    self._send(200, completion_body(server.model.name, result))

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY:
                    raise ConfigError(f"the body must be 1 to {MAX_BODY} bytes of JSON")
                return json.loads(self.rfile.read(length))

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
