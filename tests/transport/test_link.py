"""The gRPC link on loopback: messages both ways, and every fault ends one stream while
the server goes on serving others."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from coinfer.errors import ConfigError, TransportError
from coinfer.transport.link import METHOD, LinkServer, Stream, connect, envelope_type

pytestmark = pytest.mark.skipif(importlib.util.find_spec("grpc") is None, reason="needs the net extra")
TOKEN = "s3cret-token"


def _echo(stream: Stream) -> None:
    """Answer every Draft with a Decision for its position and token, until the peer ends
    or is silent for a second (a stream gRPC failed under it may never say it ended)."""
    envelope = envelope_type()
    while True:
        try:
            message = stream.recv(timeout=1)
        except TransportError:
            return
        if message is None:
            return
        d = message.draft
        stream.send(envelope(decision={"position": d.position, "token": d.token + 1}))


@pytest.fixture
def server() -> Iterator[LinkServer]:
    s = LinkServer(_echo, token=TOKEN).start()
    yield s
    s.stop(0)


def _draft(position: int, token: int, payload: bytes = b"") -> object:
    return envelope_type()(draft={"position": position, "token": token, "dist": payload})


def _round_trip(port: int, token: str = TOKEN) -> list[tuple[int, int]]:
    stream, channel = connect(f"127.0.0.1:{port}", token=token, deadline_s=10)
    try:
        out = []
        for i in range(3):
            stream.send(_draft(i, 100 + i))
            reply = stream.recv(timeout=5)
            out.append((reply.decision.position, reply.decision.token))
        return out
    finally:
        stream.close()
        channel.close()


def test_messages_go_both_ways_on_loopback(server: LinkServer) -> None:
    assert server.host == "127.0.0.1"
    assert _round_trip(server.port) == [(0, 101), (1, 102), (2, 103)]


def test_a_wrong_token_is_refused_and_others_are_still_served(server: LinkServer) -> None:
    with pytest.raises(TransportError, match="UNAUTHENTICATED"):
        _round_trip(server.port, token="guess")
    assert _round_trip(server.port) == [(0, 101), (1, 102), (2, 103)]


def test_garbage_bytes_end_that_stream_only(server: LinkServer) -> None:
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        raw = channel.stream_stream(METHOD)  # no serializer: bytes as they are
        call = raw(
            iter([b"\xff\xfe not a protobuf \x00"]),
            metadata=[("authorization", f"Bearer {TOKEN}")],
            timeout=5,
        )
        with pytest.raises(grpc.RpcError):
            list(call)
    assert _round_trip(server.port) == [(0, 101), (1, 102), (2, 103)]


def test_a_message_over_the_size_limit_ends_the_stream(server: LinkServer) -> None:
    stream, channel = connect(f"127.0.0.1:{server.port}", token=TOKEN, deadline_s=10)
    try:
        stream.send(_draft(0, 1, payload=b"\x00" * (2 << 20)))
        with pytest.raises(TransportError, match="RESOURCE_EXHAUSTED"):
            stream.recv(timeout=5)
    finally:
        stream.close()
        channel.close()
    assert _round_trip(server.port) == [(0, 101), (1, 102), (2, 103)]


def test_a_silent_server_ends_the_stream_at_the_deadline() -> None:
    silent = LinkServer(lambda stream: stream.closed.wait(30), token=TOKEN).start()
    try:
        stream, channel = connect(f"127.0.0.1:{silent.port}", token=TOKEN, deadline_s=0.5)
        with pytest.raises(TransportError, match="DEADLINE_EXCEEDED"):
            while True:
                stream.recv(timeout=5)
        channel.close()
    finally:
        silent.stop(0)


def test_a_server_needs_a_token() -> None:
    with pytest.raises(ConfigError, match="token"):
        LinkServer(_echo, token="")
