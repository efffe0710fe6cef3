"""The latency relay: bytes arrive intact and in order, at least half the round trip late
each way; a gRPC link works through it."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from coinfer.bench.relay import LatencyRelay


def _echo_server() -> tuple[socket.socket, int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_bytes_come_back_intact_in_order_and_a_round_trip_late() -> None:
    server, port = _echo_server()
    relay = LatencyRelay(("127.0.0.1", port), rtt_s=0.2, jitter_s=0.04).start()
    with socket.create_connection(("127.0.0.1", relay.port)) as c:
        payload = bytes(range(256)) * 400
        started = time.monotonic()
        for i in range(0, len(payload), 1000):
            c.sendall(payload[i : i + 1000])
        got = b""
        while len(got) < len(payload):
            got += c.recv(65536)
        elapsed = time.monotonic() - started
    relay.stop()
    server.close()
    assert got == payload
    assert elapsed >= 0.2 - 0.04  # a round trip's delay at least (the jitter may shorten one way)


def test_a_grpc_link_works_through_the_relay() -> None:
    pytest.importorskip("grpc")
    from coinfer.transport.link import LinkServer, connect, envelope_type

    def echo(stream) -> None:  # type: ignore[no-untyped-def]
        message = stream.recv(timeout=5)
        stream.send(envelope_type()(done={"reason": message.done.reason + "!"}))

    link = LinkServer(echo, token="t").start()
    with LatencyRelay(("127.0.0.1", link.port), rtt_s=0.05) as relay:
        stream, channel = connect(f"127.0.0.1:{relay.port}", token="t", deadline_s=10)
        stream.send(envelope_type()(done={"reason": "hi"}))
        assert stream.recv(timeout=5).done.reason == "hi!"
        stream.close()
        channel.close()
    link.stop(0)


def test_jitter_larger_than_the_delay_is_refused() -> None:
    with pytest.raises(ValueError):
        LatencyRelay(("127.0.0.1", 1), rtt_s=0.01, jitter_s=0.02)
