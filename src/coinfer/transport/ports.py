"""Ports for rendezvous and servers on this host."""

from __future__ import annotations

import socket

__all__ = ["free_loopback_port"]


def free_loopback_port() -> int:
    """A port on 127.0.0.1 free now (another process may take it before it is bound)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
