"""The OpenAI-compatible HTTP API as a Starlette app over served models (``served``).

Routes: ``POST /v1/chat/completions`` and ``/v1/completions`` (server-sent events with
``stream``, else one JSON body), ``GET /v1/models`` (and ``/v1/models/<id>``), ``/health``, ``/metrics`` and
``/traces/<id>`` (the viewer's page of an answer; ``/traces/<id>.json`` its trace; the
last ``KEEP_TRACES`` answers are kept). The request's ``model`` picks the served model (the
first when left out). Every answer carries the engine's ``DecodeStats``, extras and its
trace's path in a ``coinfer`` field, which OpenAI's clients ignore. A client that goes
away cancels its request. Errors are OpenAI's error objects:
400 names the field, 401 without the key, 404 for an unknown model, 413 past the body
cap, 429 with ``Retry-After`` past the queue.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from coinfer.chat.tools import ToolCall, ToolCallScanner
from coinfer.errors import CoinferError, ConfigError, ContextOverflowError
from coinfer.serve.metrics import CONTENT_TYPE_LATEST, ServerMetrics
from coinfer.serve.schemas import ServeRequest, read_body
from coinfer.serve.served import Event, Served, ServerBusy, ServerUnavailable, Ticket
from coinfer.serve.viewer import page

__all__ = ["KEEP_TRACES", "MAX_BODY", "build_app"]

MAX_BODY = 64 << 20  # bytes of JSON in a request
KEEP_TRACES = 256  # answers whose traces /traces/<id> serves, the newest
OPEN_PATHS = ("/health",)  # answered without the key


class _ClientGone(Exception):
    pass


def error_response(
    status: int, message: str, kind: str, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": None, "code": None}}
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


class _Auth:
    """Every route but ``/health`` needs ``Authorization: Bearer KEY`` when a key is set."""

    def __init__(self, app: ASGIApp, key: str | None) -> None:
        self.app, self.key = app, (key or "").encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.key and scope["path"] not in OPEN_PATHS:
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, b"Bearer " + self.key):
                answer = error_response(401, "a valid API key is needed (Authorization: Bearer KEY)",
                                        "invalid_request_error")  # fmt: skip
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def _json(request: Request) -> Any:
    if int(request.headers.get("content-length") or 0) > MAX_BODY:
        raise _TooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise _TooLarge
    try:
        return json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"the body is not JSON: {exc}") from None
    except RecursionError:
        raise ConfigError("the body's JSON nests too deeply", hint="send an OpenAI request body") from None


class _TooLarge(Exception):
    pass


def _finish(reason: str | None) -> str:
    return reason if reason in ("stop", "length") else "length"


class _Api:
    """The handlers, over ``served`` (name -> served model)."""

    def __init__(self, served: Mapping[str, Served]) -> None:
        if not served:
            raise ConfigError("a server needs at least one served model")
        self.served = dict(served)
        self.metrics = ServerMetrics(self.served)
        self.traces: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def keep_trace(self, answer_id: str, trace: dict[str, Any]) -> None:
        self.traces[answer_id] = trace
        while len(self.traces) > KEEP_TRACES:
            self.traces.popitem(last=False)

    def pick(self, name: str | None) -> Served:
        """The served model ``name`` names: ``MODEL``, or ``MODEL@ENGINE`` for one of the
        engines it runs on one loaded target (``Served.engines``)."""
        if name is None or name == "":
            return next(iter(self.served.values()))
        base, _, engine = name.partition("@")
        served = self.served.get(base)
        if served is None or (engine and engine not in served.engines()):
            raise _UnknownModel(name)
        return served

    # ---- routes ------------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        """200 while every served model can serve; 503 (and why) once one lost a part for
        good, or while the server drains before it stops, so a load balancer's health check
        takes this replica out."""
        depths = {n: s.depth for n, s in self.served.items()}
        lost = {n: why for n, s in self.served.items() if (why := s.lost_part()) is not None}
        if lost:
            return JSONResponse({"status": "unavailable", "models": depths, "lost": lost}, status_code=503)
        if any(s.draining for s in self.served.values()):  # stopping: finishing what it has, taking nothing
            return JSONResponse({"status": "draining", "models": depths}, status_code=503)
        return JSONResponse({"status": "ok", "models": depths})

    async def metrics_text(self, request: Request) -> Response:
        return Response(self.metrics.text(), media_type=CONTENT_TYPE_LATEST)

    def _model_objects(self) -> list[dict[str, Any]]:
        """OpenAI's model objects: each served model, then the engine aliases of a model
        that runs several engines on one target (``MODEL@ENGINE``)."""
        data = [
            {"id": n, "object": "model", "created": 0, "owned_by": "coinfer", "engine": s.engine}
            for n, s in self.served.items()
        ]
        return data + [
            {"id": f"{n}@{e}", "object": "model", "created": 0, "owned_by": "coinfer", "engine": e}
            for n, s in self.served.items()
            for e in s.engines()
            if len(s.engines()) > 1
        ]

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": self._model_objects()})

    async def model(self, request: Request) -> Response:
        """One model object (OpenAI's ``models.retrieve``), or 404."""
        name = request.path_params["model"]
        found = next((m for m in self._model_objects() if m["id"] == name), None)
        if found is None:
            return error_response(404, f"no served model {name!r}: see GET /v1/models", "not_found_error")
        return JSONResponse(found)

    async def trace(self, request: Request) -> Response:
        """An answer's trace: the viewer's page, or with ``.json`` the trace itself."""
        name = request.path_params["answer"]
        as_json = name.endswith(".json")
        trace = self.traces.get(name.removesuffix(".json"))
        if trace is None:
            return error_response(
                404, f"no trace {name!r}: the server keeps the last {KEEP_TRACES} answers", "not_found_error"
            )
        return JSONResponse(trace) if as_json else HTMLResponse(page(trace))

    async def chat(self, request: Request) -> Response:
        return await self.complete(request, "chat")

    async def completions(self, request: Request) -> Response:
        return await self.complete(request, "completion")

    async def complete(self, request: Request, kind: str) -> Response:
        name = "?"
        try:
            req = read_body(kind, await _json(request))
            served = self.pick(req.model)
            name = served.name
            return await self._run(request, served, req)
        except _TooLarge:
            return self._error(name, 413, f"the body is over {MAX_BODY} bytes", "invalid_request_error")
        except _UnknownModel as exc:
            return self._error(
                name, 404, f"no served model {exc.args[0]!r}: see GET /v1/models", "not_found_error"
            )
        except ServerBusy as exc:
            return self._error(
                name, 429, _said(exc), "rate_limit_error", {"Retry-After": str(exc.retry_after)}
            )
        except ServerUnavailable as exc:
            return self._error(name, 503, _said(exc), "server_error")
        except (ConfigError, ContextOverflowError) as exc:
            return self._error(name, 400, _said(exc), "invalid_request_error")
        except (_ClientGone, ClientDisconnect):
            return self._error(name, 499, "the client went away", "client_closed")
        except CoinferError as exc:
            return self._error(name, 500, _said(exc), "server_error")

    def _error(self, model: str, status: int, message: str, kind: str, headers: Any = None) -> Response:
        self.metrics.answered(model, status)
        return error_response(status, message, kind, headers)

    async def _run(self, request: Request, served: Served, req: ServeRequest) -> Response:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[Event] = asyncio.Queue()

        def sink(event: Event) -> None:
            with suppress(RuntimeError):  # the loop closed (the server stopped): nobody is listening
                loop.call_soon_threadsafe(events.put_nowait, event)

        ticket = served.submit(req, sink)
        try:
            first = await _next(events, request, ticket)
        except BaseException:
            ticket.cancel()
            raise
        if first.kind == "error":
            raise first.error or CoinferError("the request failed")
        answer = _Answer(served, req, self.metrics, self.keep_trace)
        if req.stream:
            return EventSourceResponse(answer.chunks(events, ticket), ping=15)
        return JSONResponse(await answer.body(events, request, ticket))


class _UnknownModel(Exception):
    pass


def _said(exc: CoinferError) -> str:
    """An error as one line for a client: its message, then its hint in brackets (``str``
    of a ``CoinferError`` puts the hint on a line of its own, for a terminal)."""
    said = str(exc.args[0]) if exc.args else type(exc).__name__
    hint = getattr(exc, "hint", None)
    return f"{said} ({hint})" if hint else said


async def _next(events: asyncio.Queue[Event], request: Request, ticket: Ticket) -> Event:
    """The next event; the request is cancelled if its client goes away meanwhile."""
    while True:
        try:
            return await asyncio.wait_for(events.get(), timeout=0.5)
        except TimeoutError:
            if await request.is_disconnected():
                ticket.cancel()
                raise _ClientGone from None


class _Answer:
    """One request's answer in OpenAI's shapes, from the worker's events."""

    def __init__(
        self, served: Served, req: ServeRequest, metrics: ServerMetrics, keep: Callable[[str, Any], None]
    ) -> None:
        self.served, self.req, self.metrics, self.keep = served, req, metrics, keep
        self.id = f"{'chatcmpl' if req.kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.object = "chat.completion" if req.kind == "chat" else "text_completion"
        self.started = time.perf_counter()
        self.first_at: float | None = None
        self.ends: dict[int, Event] = {}
        self.scanners: dict[int, ToolCallScanner] = {}  # a stream's samples, with tools

    def _head(self, chunk: bool) -> dict[str, Any]:
        obj = self.object + (".chunk" if chunk and self.req.kind == "chat" else "")
        return {"id": self.id, "object": obj, "created": self.created, "model": self.served.name}

    def _choice(
        self, index: int, text: str | None, finish: str | None, *, chunk: bool, calls: Sequence[ToolCall] = ()
    ) -> dict[str, Any]:
        if self.req.kind == "completion":
            return {"index": index, "text": text or "", "logprobs": None, "finish_reason": finish}
        if chunk:
            delta: dict[str, Any] = {} if text is None else {"content": text}
            if calls:
                delta["tool_calls"] = [c.as_openai(k) for k, c in enumerate(calls)]
            return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        message: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
        if calls:
            message["tool_calls"] = [c.as_openai() for c in calls]
        return {"index": index, "message": message, "logprobs": None, "finish_reason": finish}

    def _final(self, index: int, text: str) -> dict[str, Any]:
        """A whole answer's choice: its text, or the tool calls it made and the text before."""
        finish = _finish(self.ends[index].finish if index in self.ends else None)
        if self.req.tools is None:
            return self._choice(index, text, finish, chunk=False)
        content, calls = self._read(index, text)
        self.metrics.tool_answer(self.served.name, called=bool(calls))
        return self._choice(index, content, "tool_calls" if calls else finish, chunk=False, calls=calls)

    def _read(self, index: int, text: str) -> tuple[str | None, list[ToolCall]]:
        """A whole sample's text and calls: as its model returned them (a served chat
        model's), or read from the text."""
        if not self.served.reads_calls:
            return self.req.tools.read(text)  # type: ignore[union-attr]
        calls = self._returned_calls(index)
        return (text or None) if calls else text, calls

    def _returned_calls(self, index: int) -> list[ToolCall]:
        """The calls a served chat model returned with sample ``index`` (on its ``end``)."""
        end = self.ends.get(index)
        return list(end.calls or []) if end is not None else []

    def coinfer(self) -> dict[str, Any]:
        """The engine's record: stats and extras of each choice (the first's at the top)."""
        per = [
            {"index": i, "stats": e.stats.as_dict() if e.stats else None, "extras": e.extras}
            for i, e in sorted(self.ends.items())
        ]
        first = per[0] if per else {"stats": None, "extras": {}}
        out = {"engine": self.served.engine_of(self.req), "stats": first["stats"], "extras": first["extras"]}
        if any(e.trace is not None for e in self.ends.values()):
            out["trace"] = f"/traces/{self.id}"
        return out | ({"choices": per} if len(per) > 1 else {})

    def record(self, event: Event) -> None:
        if event.kind == "delta" and self.first_at is None and event.text:
            self.first_at = time.perf_counter()
        if event.kind == "end":
            self.ends[event.index] = event
            if event.trace is not None and event.index == 0:  # the first choice's, of several
                self.keep(self.id, event.trace)

    def done(self, usage: Any, status: int = 200) -> None:
        ttft = None if self.first_at is None else self.first_at - self.started
        stats = [e.stats for e in self.ends.values() if e.stats is not None]
        self.metrics.answered(self.served.name, status)
        self.metrics.finished(
            self.served.name, seconds=time.perf_counter() - self.started, ttft=ttft, usage=usage, stats=stats
        )

    async def body(self, events: asyncio.Queue[Event], request: Request, ticket: Ticket) -> dict[str, Any]:
        texts: dict[int, list[str]] = {}
        while True:
            event = await _next(events, request, ticket)
            self.record(event)
            if event.kind == "error":
                raise event.error or CoinferError("the request failed")
            if event.kind == "delta":
                texts.setdefault(event.index, []).append(event.text)
            if event.kind == "done":
                break
        choices = [self._final(i, "".join(texts.get(i, []))) for i in range(self.req.n)]
        self.done(event.usage)
        return {
            **self._head(False),
            "choices": choices,
            "usage": _usage(event.usage),
            "coinfer": self.coinfer(),
        }

    def _shown(self, index: int, text: str) -> str:
        """What of a sample's new text a stream shows now: with tools, text that may begin
        a call waits for the end (``ToolCallScanner``)."""
        if self.req.tools is None or self.served.reads_calls:
            return text
        return self.scanners.setdefault(index, self.req.tools.scanner()).push(text)

    def _end_chunks(self, event: Event) -> list[dict[str, Any]]:
        """A stream's last chunks of a sample: what a tool scanner held back (as text, or
        as the calls it was), then the finish with the ``coinfer`` field."""
        index, finish, chunks = event.index, _finish(event.finish), []
        if self.req.tools is not None:  # a sample that sent no text has no scanner yet
            if self.served.reads_calls:
                rest, calls = "", self._returned_calls(index)  # ``record`` kept this end
            else:
                rest, calls = (self.scanners.pop(index, None) or self.req.tools.scanner()).finish()
            self.metrics.tool_answer(self.served.name, called=bool(calls))
            if rest:
                chunks.append(self._choice(index, rest, None, chunk=True))
            if calls:
                chunks.append(self._choice(index, None, None, chunk=True, calls=calls))
                finish = "tool_calls"
        last = self._choice(index, None if self.req.kind == "chat" else "", finish, chunk=True)
        payloads = [{**self._head(True), "choices": [c]} for c in chunks]
        return payloads + [{**self._head(True), "choices": [last], "coinfer": self.coinfer()}]

    async def chunks(self, events: asyncio.Queue[Event], ticket: Ticket) -> AsyncIterator[str]:
        """The stream's ``data:`` payloads: a first chunk with the role (chat), the text as
        it comes, each choice's finish, the usage when asked for, then ``[DONE]``."""
        try:
            if self.req.kind == "chat":
                first = [{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                          "finish_reason": None} for i in range(self.req.n)]  # fmt: skip
                yield json.dumps({**self._head(True), "choices": first})
            while True:
                event = await events.get()
                self.record(event)
                if event.kind == "error":
                    error = event.error or CoinferError("the request failed")
                    yield json.dumps({"error": {"message": _said(error), "type": "server_error"}})
                    self.metrics.answered(
                        self.served.name, 503 if isinstance(error, ServerUnavailable) else 500
                    )
                    return
                if event.kind == "delta" and event.text:
                    text = self._shown(event.index, event.text)
                    if text:
                        choice = self._choice(event.index, text, None, chunk=True)
                        yield json.dumps({**self._head(True), "choices": [choice]})
                elif event.kind == "end":
                    for payload in self._end_chunks(event):
                        yield json.dumps(payload)
                elif event.kind == "done":
                    if self.req.include_usage:
                        yield json.dumps({**self._head(True), "choices": [], "usage": _usage(event.usage)})
                    self.done(event.usage)
                    yield "[DONE]"
                    return
        finally:
            ticket.cancel()  # a client that went away: its generation stops (a finished one: no-op)


def _usage(usage: Any) -> dict[str, Any]:
    """OpenAI's usage object; ``prompt_tokens_details.cached_tokens``: the prompt tokens a
    cache of an earlier request held (the prefix cache's hit)."""
    if usage is None:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": getattr(usage, "cached_tokens", 0)},
    }


def build_app(served: Mapping[str, Served], *, api_key: str | None = None) -> ASGIApp:
    """The app over ``served`` (name -> a started served model); ``api_key``: required on
    every route but ``/health``."""
    api = _Api(served)
    routes = [
        Route("/health", api.health, methods=["GET"]),
        Route("/metrics", api.metrics_text, methods=["GET"]),
        Route("/traces/{answer}", api.trace, methods=["GET"]),
        *[Route(p + "/models", api.models, methods=["GET"]) for p in ("/v1", "")],
        *[Route(p + "/models/{model:path}", api.model, methods=["GET"]) for p in ("/v1", "")],
        *[Route(p + "/chat/completions", api.chat, methods=["POST"]) for p in ("/v1", "")],
        *[Route(p + "/completions", api.completions, methods=["POST"]) for p in ("/v1", "")],
    ]
    handlers = {404: _no_route, 405: _no_route}
    return _Auth(Starlette(routes=routes, exception_handlers=handlers), api_key)  # type: ignore[arg-type]


async def _no_route(request: Request, exc: Exception) -> Response:
    status = getattr(exc, "status_code", 404)
    return error_response(status, f"no route {request.method} {request.url.path}", "not_found_error")
