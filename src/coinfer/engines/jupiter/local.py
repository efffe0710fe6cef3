"""A Jupiter pipeline on this host, from Python: this process is device 0 and
``devices - 1`` ``coinfer edge worker`` processes are the others, each pinned to its
cores, meeting on a free loopback port with a fresh token.

    with start_local_pipeline("qwen2.5-coder-0.5b", devices=2) as pipeline:
        print(generate(pipeline.cluster, "Write quicksort.").text)

``coinfer serve --engine jupiter`` starts its pipeline this way. ``join_pipeline`` is
device 0 of a pipeline whose other devices run on other hosts (``coinfer edge worker``).
"""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass, field
from types import TracebackType

from coinfer.engines.jupiter.cluster import EdgeCluster
from coinfer.engines.jupiter.static_stage import check_placement
from coinfer.engines.jupiter.worker import worker_command
from coinfer.errors import ConfigError
from coinfer.transport.ports import free_loopback_port

__all__ = [
    "LocalPipeline",
    "device_cores",
    "join_pipeline",
    "placement",
    "spawn_local_workers",
    "start_local_pipeline",
    "stop_workers",
]


def placement(device: str | None, kv: str | None, dtype: str | None) -> tuple[str, str]:
    """(KV cache kind, device) of this host's stages: the CPU by default, static caches by
    default off it (the dynamic-cache stage runs on the CPU, in float32: a ``dtype`` it
    cannot take is refused here too)."""
    device = device or "cpu"
    kv = kv or ("dynamic" if device == "cpu" else "static")
    check_placement(kv, device, dtype)
    return kv, device


def device_cores(rank: int, per_device: int) -> list[int]:
    """Device ``rank``'s cores: the ``per_device`` after those of the ranks before it."""
    available = sorted(os.sched_getaffinity(0))
    return [available[(rank * per_device + i) % len(available)] for i in range(per_device)]


def spawn_local_workers(
    world: int, master: str, token: str, *, cores_per_device: int = 1, device: str = "cpu",
    dtype: str | None = None,
) -> list[subprocess.Popen[bytes]]:  # fmt: skip
    """Devices 1 … ``world - 1`` as worker processes here, each on its own cores."""
    env = {**os.environ, "COINFER_EDGE_TOKEN": token}
    return [
        subprocess.Popen(
            worker_command(
                rank, world, master, device_cores(rank, cores_per_device), f"device{rank}", device, dtype
            ),  # fmt: skip
            env=env,
            start_new_session=True,
        )
        for rank in range(1, world)
    ]


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


@dataclass
class LocalPipeline:
    """A started pipeline: the ``cluster`` (device 0, every device joined) and its workers."""

    cluster: EdgeCluster
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def close(self) -> None:
        """Close the cluster, then end the workers and wait for them."""
        try:
            self.cluster.close()
        finally:
            stop_workers(self.workers)

    def __enter__(self) -> LocalPipeline:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def start_local_pipeline(
    model: str, *, devices: int = 2, cores_per_device: int = 1, n_ctx: int = 4096, kv: str | None = None,
    device: str | None = None, dtype: str | None = None,
) -> LocalPipeline:  # fmt: skip
    """``model`` served by ``devices`` devices on this host (see the module); returns once
    every device has joined, profiled and loaded its planned layers. ``kv`` and ``device``:
    as ``placement`` chooses by default."""
    if devices < 1 or cores_per_device < 1:
        raise ConfigError("devices and cores per device must be >= 1", hint="e.g. --devices 2")
    kv, device = placement(device, kv, dtype)
    master, token = f"127.0.0.1:{free_loopback_port()}", secrets.token_hex(16)
    workers = spawn_local_workers(devices, master, token, cores_per_device=cores_per_device, device=device)
    try:
        cluster = EdgeCluster(
            model, world=devices, master=master, threads=cores_per_device, n_ctx=n_ctx, token=token, kv=kv,
            device=device, dtype=dtype,
        )  # fmt: skip
    except BaseException:
        stop_workers(workers)
        raise
    return LocalPipeline(cluster, workers)


def join_pipeline(
    model: str, *, listen: str, devices: int, token: str | None = None, cores_per_device: int = 1,
    n_ctx: int = 4096, kv: str | None = None, device: str | None = None, dtype: str | None = None,
) -> LocalPipeline:  # fmt: skip
    """Device 0 of a pipeline whose other ``devices - 1`` devices run elsewhere: it waits at
    ``listen`` (HOST:PORT) for them (``coinfer edge worker --master LISTEN`` on each, with
    the same ``token``, by default ``$COINFER_EDGE_TOKEN``), plans and loads as
    ``start_local_pipeline`` does; it starts no process, and ``close`` ends none."""
    token = token or os.environ.get("COINFER_EDGE_TOKEN", "")
    if not token:
        raise ConfigError(
            "the devices need a shared secret", hint="export COINFER_EDGE_TOKEN=<random> on each"
        )
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or devices < 2:
        raise ConfigError(f"listen at HOST:PORT for 2 or more devices, got {listen!r} and {devices}")
    kv, device = placement(device, kv, dtype)
    cluster = EdgeCluster(
        model, world=devices, master=listen, threads=cores_per_device, n_ctx=n_ctx, token=token, kv=kv,
        device=device, dtype=dtype,
    )  # fmt: skip
    return LocalPipeline(cluster)
