"""An authenticated bidirectional stream of protobuf messages over gRPC.

The server (``LinkServer``) binds to loopback unless told otherwise, checks a shared token
on every stream (``authorization: Bearer …`` metadata, compared in constant time), limits
message sizes, keeps idle connections alive with pings and serves TLS when given a
certificate. Each accepted stream runs the server's ``serve(stream)`` on its own thread;
a stream that fails (a wrong token, bytes that do not parse, a peer that vanished) ends
alone and the server goes on serving the others.

Both ends see one ``Stream``: ``send`` a message, ``recv`` the next (None when
``timeout`` passes first), ``close``. Messages are ``Envelope`` protobufs and nothing
received is ever unpickled. gRPC gives the framing, flow control, deadlines (a client
stream has one for its whole life), keepalive and gzip compression.
"""

from __future__ import annotations

import hmac
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from coinfer.errors import ConfigError, MissingDependencyError, TransportError

__all__ = ["LinkServer", "Stream", "Tls", "connect", "envelope_type"]

log = logging.getLogger(__name__)

METHOD = "/coinfer.dragon.Dragon/Session"
MAX_MESSAGE_BYTES = 1 << 20
_KEEPALIVE = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
_LIMITS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
]
_RECONNECT = [  # a kept channel tries a server that went away again within seconds
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 4_000),
]
_CLOSED = object()


def _grpc() -> Any:
    try:
        import grpc
    except ImportError as exc:
        raise MissingDependencyError("grpcio", "net") from exc
    return grpc


def envelope_type() -> Any:
    """The ``Envelope`` message class (generated from ``proto/dragon.proto``)."""
    try:
        from coinfer.transport.proto import dragon_pb2
    except ImportError as exc:
        raise MissingDependencyError("protobuf", "net") from exc
    return dragon_pb2.Envelope


class Stream:
    """One side of a bidirectional stream: messages out through a queue that gRPC drains,
    messages in through a queue a reader fills."""

    def __init__(self) -> None:
        self._out: queue.Queue[Any] = queue.Queue()
        self._in: queue.Queue[Any] = queue.Queue()
        self.closed = threading.Event()
        self.error: str | None = None

    def send(self, message: Any) -> None:
        if self.closed.is_set():
            raise TransportError(f"the stream is closed{': ' + self.error if self.error else ''}")
        self._out.put(message)

    def recv(self, timeout: float | None = None) -> Any | None:
        """The next message; None when ``timeout`` passes first. ``TransportError`` once the
        stream has ended (the peer closed it, failed, or the deadline passed)."""
        try:
            item = self._in.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _CLOSED:
            self._in.put(_CLOSED)  # every later recv sees the end too
            raise TransportError(f"the stream ended{': ' + self.error if self.error else ''}")
        return item

    def close(self) -> None:
        if not self.closed.is_set():
            self.closed.set()
            self._out.put(_CLOSED)

    def finish(self, timeout: float) -> None:
        """Close this side and wait (at most ``timeout``) for the other to end too, so
        that what was sent last is delivered before the connection goes."""
        self.close()
        deadline = time.monotonic() + timeout
        try:
            while (left := deadline - time.monotonic()) > 0:
                self.recv(timeout=left)
        except TransportError:
            return

    # ---- for the ends ---------------------------------------------------------------
    def outgoing(self, alive: Callable[[], bool] = lambda: True) -> Iterator[Any]:
        """What ``send`` queued, until ``close`` (or until ``alive()`` turns False: the
        call was cancelled under us)."""
        while True:
            try:
                item = self._out.get(timeout=0.5)
            except queue.Empty:
                if not alive():
                    return
                continue
            if item is _CLOSED:
                return
            yield item

    def read_from(self, incoming: Iterator[Any], on_error: Callable[[Exception], str]) -> None:
        try:
            for message in incoming:
                self._in.put(message)
        except Exception as exc:  # gRPC ends a failed stream by raising from the iterator
            self.error = on_error(exc)
        finally:
            self._in.put(_CLOSED)
            self.close()


def _describe(exc: Exception) -> str:
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        return f"{code().name}: {details()}"
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class Tls:
    """PEM bytes: the server's certificate chain and key; a client's trusted root."""

    certificate: bytes | None = None
    key: bytes | None = None
    root: bytes | None = None


class LinkServer:
    """Serves ``serve(stream)`` for every authenticated stream, on ``host:port`` (port 0:
    any free one; ``port`` is the one bound)."""

    def __init__(
        self,
        serve: Callable[[Stream], None],
        *,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: Tls | None = None,
        max_streams: int = 8,
    ) -> None:
        if not token:
            raise ConfigError("a link server needs a token", hint="set COINFER_LINK_TOKEN to a shared secret")
        grpc = _grpc()
        envelope = envelope_type()
        self._serve, self._token = serve, token.encode()
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_streams, thread_name_prefix="link"),
            options=[*_LIMITS, *_KEEPALIVE],
            maximum_concurrent_rpcs=max_streams,
            compression=grpc.Compression.Gzip,
        )
        handler = grpc.stream_stream_rpc_method_handler(
            self._session,
            request_deserializer=envelope.FromString,
            response_serializer=envelope.SerializeToString,
        )
        service, method = METHOD.strip("/").split("/")
        self._server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler(service, {method: handler})]
        )
        address = f"{host}:{port}"
        if tls is not None and tls.certificate and tls.key:
            creds = grpc.ssl_server_credentials([(tls.key, tls.certificate)])
            self.port = self._server.add_secure_port(address, creds)
        else:
            self.port = self._server.add_insecure_port(address)
        if self.port == 0:
            raise ConfigError(f"cannot listen on {address}", hint="pick a free port, or 0 for any")
        self.host = host

    def start(self) -> LinkServer:
        self._server.start()
        return self

    def stop(self, grace: float | None = 1.0) -> None:
        """Cancel what is running after ``grace`` seconds; wait for the end a little longer."""
        self._server.stop(grace).wait(timeout=(grace or 0) + 5)

    def wait(self) -> None:
        self._server.wait_for_termination()

    def _authorized(self, context: Any) -> bool:
        metadata = dict(context.invocation_metadata())
        given = str(metadata.get("authorization", "")).removeprefix("Bearer ").encode()
        return hmac.compare_digest(given, self._token)

    def _session(self, requests: Iterator[Any], context: Any) -> Iterator[Any]:
        grpc = _grpc()
        if not self._authorized(context):
            log.warning("refused a stream from %s: wrong or missing token", context.peer())
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong or missing token")
        stream = Stream()
        if not context.add_callback(stream.close):  # the call ended already
            return
        reader = threading.Thread(target=stream.read_from, args=(requests, _describe), daemon=True)
        reader.start()
        worker = threading.Thread(target=self._run, args=(stream, context.peer()), daemon=True)
        worker.start()
        yield from stream.outgoing(context.is_active)

    def _run(self, stream: Stream, peer: str) -> None:
        try:
            self._serve(stream)
        except TransportError as exc:  # the peer went away or broke the protocol: this stream only
            log.warning("a stream from %s ended early: %s", peer, exc)
        except Exception:
            log.exception("a stream from %s failed", peer)
        finally:
            stream.close()


class Channel:
    """A connection to a link server at ``host:port``, opened at once in the background and
    kept: every stream rides it, so a stream opened later pays no handshake, and gRPC
    reconnects it when the server comes back after a failure."""

    def __init__(self, address: str, *, tls: Tls | None = None) -> None:
        grpc = _grpc()
        envelope = envelope_type()
        options = [*_LIMITS, *_KEEPALIVE, *_RECONNECT]
        if tls is not None:
            self._channel = grpc.secure_channel(
                address, grpc.ssl_channel_credentials(tls.root), options=options
            )
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._ready = grpc.channel_ready_future(self._channel)  # starts connecting now
        self._method = self._channel.stream_stream(
            METHOD, request_serializer=envelope.SerializeToString, response_deserializer=envelope.FromString
        )

    def stream(self, *, token: str, deadline_s: float) -> Stream:
        """A new stream that lasts at most ``deadline_s``."""
        grpc = _grpc()
        stream = Stream()
        call = self._method(
            stream.outgoing(),
            metadata=[("authorization", f"Bearer {token}")],
            timeout=deadline_s,
            compression=grpc.Compression.Gzip,
        )
        threading.Thread(target=stream.read_from, args=(call, _describe), daemon=True).start()
        return stream

    def close(self) -> None:
        self._ready.cancel()
        self._channel.close()


def connect(address: str, *, token: str, deadline_s: float, tls: Tls | None = None) -> tuple[Stream, Channel]:
    """Open a channel and one stream on it that lasts at most ``deadline_s``; the stream
    and the channel (close it when done)."""
    channel = Channel(address, tls=tls)
    return channel.stream(token=token, deadline_s=deadline_s), channel
