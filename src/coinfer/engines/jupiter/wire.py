"""The devices' process group and its control messages.

Every device is one process in a ``torch.distributed`` group on the gloo backend (TCP;
loopback or a real network). Rank 0 drives: it sends each worker control messages, JSON
objects as a length and a byte tensor (never pickled), and every worker answers rank 0 the
same way. Sizes are bounded, and the first message carries the cluster's token, which a
worker checks against its own ``COINFER_EDGE_TOKEN`` before it acts on anything.
"""

from __future__ import annotations

import hmac
import json
import os
from datetime import timedelta
from typing import Any

from coinfer.errors import ConfigError, TransportError

__all__ = [
    "MAX_MESSAGE",
    "REQUESTS",
    "TOKEN_ENV",
    "check_request",
    "check_token",
    "join",
    "leave",
    "parse_master",
    "recv_json",
    "send_json",
]

MAX_MESSAGE = 1 << 20
TOKEN_ENV = "COINFER_EDGE_TOKEN"
_MAX_INT = 1 << 31

# each request rank 0 may send a worker: its fields, their types, and whether required
REQUESTS: dict[str, dict[str, tuple[tuple[type, ...], bool]]] = {
    "profile": {"model": ((str,), True), "kv": ((str,), False), "dtype": ((str,), False)},
    "link_send": {"peer": ((int,), True)},
    "link_echo": {"peer": ((int,), True)},
    "load": {"start": ((int,), True), "stop": ((int,), True), "kv": ((str,), False),
             "n_ctx": ((int,), False), "dtype": ((str,), False)},
    "serve": {"sampling": ((dict, type(None)), False), "tree_width": ((int, type(None)), False),
              "branches": ((bool, type(None)), False)},
    "heads": {"heads": ((int,), True), "hidden": ((int,), True), "vocab": ((int,), False)},
    "bye": {},
}  # fmt: skip


def parse_master(text: str) -> tuple[str, int]:
    """``HOST:PORT`` of rank 0's rendezvous."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--master {text!r} is not HOST:PORT", hint="e.g. --master 10.0.0.2:29500")
    return host, int(port)


def join(rank: int, world: int, master: str, *, timeout_s: float = 120.0) -> None:
    """Join the devices' process group as ``rank`` of ``world`` (rank 0 listens at
    ``master``, the others connect to it)."""
    import torch.distributed as dist

    if not 0 <= rank < world:
        raise ConfigError(f"rank {rank} is not within a world of {world}", hint="ranks run 0..world-1")
    host, port = parse_master(master)
    try:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{host}:{port}",
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=timeout_s),
        )
    except (RuntimeError, ValueError) as exc:  # torch's rendezvous and gloo errors
        raise TransportError(
            f"device {rank} could not join the group at {master}: {str(exc).splitlines()[0][:200]}",
            hint="start every device with the same --world and --master, and rank 0 first",
        ) from exc


def leave() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def send_json(obj: dict[str, Any], dst: int) -> None:
    import torch
    import torch.distributed as dist

    data = json.dumps(obj).encode()
    if len(data) > MAX_MESSAGE:
        raise ConfigError(f"a control message of {len(data)} bytes is over {MAX_MESSAGE}")
    dist.send(torch.tensor([len(data)], dtype=torch.int64), dst)
    dist.send(torch.frombuffer(bytearray(data), dtype=torch.uint8), dst)


def recv_json(src: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    size = torch.empty(1, dtype=torch.int64)
    dist.recv(size, src)
    n = int(size)
    if not 0 < n <= MAX_MESSAGE:
        raise TransportError(
            f"device {src} announced a control message of {n} bytes", hint="a peer is not coinfer"
        )
    data = torch.empty(n, dtype=torch.uint8)
    dist.recv(data, src)
    try:
        obj = json.loads(bytes(data.numpy()))
    except ValueError as exc:
        raise TransportError(f"device {src} sent a malformed control message") from exc
    if not isinstance(obj, dict):
        raise TransportError(f"device {src} sent a control message that is not an object")
    return obj


def check_request(message: dict[str, Any]) -> str:
    """The request a control message from rank 0 makes, its fields checked against
    ``REQUESTS`` (types, and whole numbers within 0..2^31) before a worker acts on it."""
    op = message.get("op")
    if not isinstance(op, str) or op not in REQUESTS:
        raise TransportError(
            f"rank 0 sent an unknown request {str(op)[:40]!r}", hint="run the same coinfer on every device"
        )
    for name, (kinds, required) in REQUESTS[op].items():
        if name not in message:
            if required:
                raise TransportError(f"rank 0's {op} request lacks its {name!r}")
            continue
        value = message[name]
        if not isinstance(value, kinds) or (int in kinds and isinstance(value, bool)):
            raise TransportError(f"rank 0's {op} request has a {type(value).__name__} for {name!r}")
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < _MAX_INT:
            raise TransportError(f"rank 0's {op} request has {name!r} = {value}, outside 0..2^31")
    return op


def check_token(message: dict[str, Any]) -> None:
    """The first message's token must equal this device's ``COINFER_EDGE_TOKEN``."""
    mine = os.environ.get(TOKEN_ENV, "")
    theirs = str(message.get("token", ""))
    if not mine or not hmac.compare_digest(mine.encode(), theirs.encode()):
        raise TransportError(
            "rank 0 did not present this device's token",
            hint=f"export the same {TOKEN_ENV} on every device",
        )
