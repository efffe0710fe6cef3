"""The bench's shaped link: a namespace behind a veth pair with ``tbf`` on both ends really
holds traffic to its rate, and leaves nothing behind."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from coinfer.bench.netns import PEER, ShapedLink, tbf
from coinfer.errors import ConfigError


def _can_make_namespaces() -> bool:
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        return False
    name = f"coinfer-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode == 0
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    return made


_SINK = """
import socket, sys
s = socket.create_server((sys.argv[1], 0))
print(s.getsockname()[1], flush=True)
c, _ = s.accept()
n = 0
while chunk := c.recv(65536):
    n += len(chunk)
c.sendall(str(n).encode())
c.close()
"""


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="positive"):
        ShapedLink(0)


def test_the_bucket_holds_ten_milliseconds_of_traffic() -> None:
    assert tbf(100)[:5] == ["tbf", "rate", "100mbit", "burst", str(125_000)]
    assert tbf(0.5)[4] == "16384"  # never less than 16 KiB


@pytest.mark.skipif(not _can_make_namespaces(), reason="needs root with CAP_NET_ADMIN and iproute2")
def test_traffic_through_the_pair_is_held_to_the_rate() -> None:
    payload = 96 * 1024
    with ShapedLink(0.5) as link:
        sink = subprocess.Popen(
            [*link.prefix, sys.executable, "-c", _SINK, PEER], stdout=subprocess.PIPE, text=True
        )
        try:
            assert sink.stdout is not None
            port = int(sink.stdout.readline())
            started = time.monotonic()
            with socket.create_connection((PEER, port), timeout=30) as conn:
                conn.sendall(b"x" * payload)
                conn.shutdown(socket.SHUT_WR)
                got = int(conn.recv(64))
            elapsed = time.monotonic() - started
        finally:
            sink.wait(timeout=30)
        name = link.name
    assert got == payload
    # 96 KiB at 0.5 Mbit/s is 1.57 s; the first 16 KiB may pass at once
    assert elapsed >= (payload - 16384) * 8 / 0.5e6 * 0.9
    assert name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
