"""The server: the app (``serve.app``) on uvicorn, on a thread of this process.

``Server({name: served}).start()`` binds (loopback unless told another host; port 0 picks
a free one), serves until ``stop`` and then closes the served models. ``stop(drain_s)``
stops gracefully, as an operator's rolling restart needs: new requests get 503 and
``/health`` says ``draining`` (a load balancer takes the replica out), the open requests
run to their end for up to ``drain_s`` seconds, and those still open then end with a
clean error (a 503, or an error event in their stream) before the HTTP server exits.
``ChatServer(model)``
serves one ``ChatModel`` (a remote API, a scripted fake), its queued requests answered in
batches.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from coinfer.chat.base import ChatModel
from coinfer.errors import ConfigError
from coinfer.serve.app import build_app
from coinfer.serve.chat_served import ChatServed
from coinfer.serve.served import Served

__all__ = ["ChatServer", "Server"]

BACKLOG = 2048  # connections the kernel holds before the server accepts them


class Server:
    """Serve ``served`` (name -> served model, started here) over HTTP; ``url`` is the
    API's base (``…/v1``)."""

    def __init__(
        self, served: Mapping[str, Served], *, host: str = "127.0.0.1", port: int = 0,
        api_key: str | None = None,
    ) -> None:  # fmt: skip
        self.served = dict(served)
        self.host, self.port, self.api_key = host, port, api_key
        self._sock: socket.socket | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._sock is None:
            raise ConfigError("the server is not started")
        host, port = self._sock.getsockname()[:2]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{port}/v1"

    def start(self, *, timeout_s: float = 30.0) -> Server:
        import uvicorn

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as exc:
            sock.close()
            raise ConfigError(
                f"cannot listen on {self.host}:{self.port}: {exc}", hint="pick another --port"
            ) from exc
        sock.listen(BACKLOG)
        self._sock = sock
        for s in self.served.values():
            s.start()
        app = build_app(self.served, api_key=self.api_key)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", backlog=BACKLOG,
                                timeout_graceful_shutdown=5)  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ConfigError("the server did not start", hint="see the log above")
            time.sleep(0.01)
        return self

    @property
    def open_requests(self) -> int:
        """Requests waiting or running, over every served model."""
        return sum(s.depth for s in self.served.values())

    def stop(self, drain_s: float = 0.0, *, hurry: threading.Event | None = None) -> None:
        """Stop: refuse new requests, let the open ones finish for up to ``drain_s``
        seconds (sooner once ``hurry`` is set), end the rest with an error their clients
        receive, then stop the HTTP server and free the models."""
        for s in self.served.values():
            s.stop_taking()
        deadline = time.monotonic() + drain_s
        while self.open_requests and time.monotonic() < deadline and not (hurry and hurry.is_set()):
            time.sleep(0.05)
        for s in self.served.values():  # the HTTP side still runs: what is open hears why it ends
            s.close()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=15)
        if self._sock is not None:
            self._sock.close()

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ChatServer(Server):
    """One ``ChatModel`` served (``max_batch`` queued requests answered together)."""

    def __init__(
        self, model: ChatModel, *, host: str = "127.0.0.1", port: int = 0, max_batch: int = 8,
        api_key: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(
            {model.name: ChatServed(model, max_batch=max_batch)}, host=host, port=port, api_key=api_key
        )
        self.model = model
