"""A Jupiter pipeline on this host, from Python: this process is device 0 and
``devices - 1`` ``coinfer edge worker`` processes are the others, each pinned to its
cores (and, given budgets, held to its memory by a cgroup of its own), meeting on a free
loopback port with a fresh token.

    with start_local_pipeline("qwen2.5-coder-0.5b", devices=2) as pipeline:
        print(generate(pipeline.cluster, "Write quicksort.").text)

``join_pipeline`` is device 0 of a pipeline whose other devices run on other hosts
(``coinfer edge worker``). Both are two steps, which a caller may take apart: the devices
(``launch_devices`` / ``await_devices``), then the model planned over them and loaded
(``LocalPipeline.connect``). ``LocalPipeline.watched`` runs a request on a thread while
this one watches the workers, so a device that dies ends the run with its name
(``DeviceLostError``) instead of leaving it waiting; ``LocalPipeline.guard`` watches
them in the background for a server, whose requests run on threads of their own.
``coinfer edge launch`` and ``coinfer serve --engine jupiter`` are these calls, given flags.
"""

from __future__ import annotations

import os
import queue
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

from coinfer.engines.jupiter.cluster import EdgeCluster
from coinfer.engines.jupiter.static_stage import check_placement
from coinfer.engines.jupiter.worker import worker_command
from coinfer.errors import BudgetError, ConfigError, DeviceLostError
from coinfer.sandbox.cgroup import MemoryCgroup, fence_each, remove_all
from coinfer.transport.ports import free_loopback_port

__all__ = [
    "LocalPipeline",
    "await_devices",
    "device_cores",
    "join_pipeline",
    "launch_devices",
    "memory_fences",
    "pin_to",
    "placement",
    "spawn_local_workers",
    "start_local_pipeline",
    "stop_workers",
]

T = TypeVar("T")
POLL_S = 0.2  # how often ``watched`` looks at the workers while the request is quiet


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


def pin_to(cores: list[int]) -> None:
    """This process (and torch's threads) on ``cores`` only."""
    import torch

    os.sched_setaffinity(0, cores)
    torch.set_num_threads(len(cores))


def memory_fences(budgets: list[float | None] | None) -> tuple[list[MemoryCgroup], str | None]:
    """A memory cgroup per budget (bytes), so that the OS holds each device to it; or none,
    and why not, where none can be made (no root, no memory controller)."""
    if not budgets:
        return [], None
    groups: list[MemoryCgroup] = []
    try:
        for budget in budgets:
            groups.append(MemoryCgroup(int(budget or 0), prefix="coinfer-edge"))
    except BudgetError as exc:
        for g in groups:
            g.remove()
        return [], str(exc).splitlines()[0]
    return groups, None


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
    """A pipeline's devices as this host holds them: where they meet (``master``,
    ``token``), the workers it started, the memory cgroups holding device 0 and each worker
    to its budget (``fences``, empty where budgets were not given or cannot be enforced:
    ``unenforced`` says why), and, once ``connect`` ran, the ``cluster``."""

    master: str
    token: str
    devices: int
    device: str = "cpu"
    cores_per_device: int = 1
    budgets: list[float | None] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    fences: list[MemoryCgroup] = field(default_factory=list)
    unenforced: str | None = None
    _cluster: EdgeCluster | None = None
    _lost: str | None = None  # the first loss seen: workers stopped after it die of our signal
    _stopped: threading.Event = field(default_factory=threading.Event)

    @property
    def cluster(self) -> EdgeCluster:
        if self._cluster is None:
            raise ConfigError("the pipeline's devices have no model loaded yet", hint="call connect(model)")
        return self._cluster

    def connect(
        self, model: str, *, n_ctx: int = 4096, kv: str | None = None, dtype: str | None = None,
        split: str = "jupiter",
    ) -> EdgeCluster:  # fmt: skip
        """Device 0 here: every device joins, is profiled, gets its layers planned under
        its budget (``split``: ``jupiter``, Eq. 1, or ``memory``, exo's split), enters its
        fence and loads them. Returns the cluster (also ``self.cluster``)."""
        kv, device = placement(self.device, kv, dtype)
        members = [os.getpid()] + [p.pid for p in self.workers]
        self._cluster = EdgeCluster(
            model, world=self.devices, master=self.master, threads=self.cores_per_device,
            budgets=self.budgets, split=split, n_ctx=n_ctx, token=self.token, kv=kv, device=device,
            dtype=dtype,
            before_load=fence_each(self.fences, members[: len(self.fences)]) if self.fences else None,
        )  # fmt: skip
        return self._cluster

    def lost_device(self) -> str | None:
        """A line naming the first worker seen dead (and how: an OOM kill under its budget
        is said so), or None while every worker runs."""
        if self._lost is not None:
            return self._lost
        for rank, p in enumerate(self.workers, start=1):
            code = p.poll()
            if code is not None and code != 0:
                how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
                if rank < len(self.fences) and self.fences[rank].oom_kills():
                    budget = self.fences[rank].limit / 2**30
                    how = f"ran out of its {budget:.2f} GiB budget (the OS's OOM killer ended it)"
                self._lost = f"device {rank} (pid {p.pid}) {how}"
                return self._lost
        return None

    def guard(self, *, poll_s: float = POLL_S) -> None:
        """Watch the workers in the background for as long as the pipeline runs (a
        server's, whose requests come on threads of their own): the first to die stops
        every other, so no request waits in a collective call of a broken group, and
        ``lost_device`` goes on naming it, not the workers stopped after it."""

        def watch() -> None:
            while not self._stopped.wait(poll_s):
                if self.lost_device() is not None:
                    stop_workers(self.workers)
                    return

        threading.Thread(target=watch, daemon=True, name="jupiter-guard").start()

    def watched(self, work: Callable[[], Iterable[T]], *, poll_s: float = POLL_S) -> Iterator[T]:
        """``work()``'s items, produced on a thread while this one watches the workers: a
        worker that dies stops every worker and raises ``DeviceLostError`` naming it
        (the thread, which may sit in a collective call of the broken group, is left)."""
        out: queue.Queue[tuple[bool, Any]] = queue.Queue()
        threading.Thread(target=_produce, args=(work, out), daemon=True, name="jupiter-request").start()
        while True:
            try:
                more, value = out.get(timeout=poll_s)
            except queue.Empty:
                self._raise_if_lost(
                    None, "its own error, if any, is printed above; no process is left running"
                )
                continue
            if more:
                yield value
            elif value is None:
                return
            else:
                self._raise_if_lost(value, "no process is left running")
                raise value

    def _raise_if_lost(self, cause: BaseException | None, hint: str) -> None:
        lost = self.lost_device()
        if lost is not None:
            stop_workers(self.workers)
            raise DeviceLostError(lost, hint=hint) from cause

    def memory(self) -> dict[str, Any] | None:
        """Each fenced device's budget and the most its cgroup held (the OS's count, page
        cache in), or why the budgets were not enforced; None without budgets."""
        if not self.fences:
            return None if self.unenforced is None else {"enforced": False, "why": self.unenforced}
        return {
            "enforced": True,
            "budget_mb": [g.limit // 2**20 for g in self.fences],
            "peak_mb": [g.peak() // 2**20 for g in self.fences],
        }

    def stop(self) -> None:
        """End the workers and remove the fences, leaving the cluster as it is (for a run
        whose request thread may be stuck in a broken group)."""
        self._stopped.set()
        stop_workers(self.workers)
        remove_all(self.fences, member=os.getpid())
        self.fences = []

    def close(self) -> None:
        """Close the cluster, then end the workers, wait for them and remove the fences."""
        try:
            if self._cluster is not None:
                self._cluster.close()
        finally:
            self.stop()

    def __enter__(self) -> LocalPipeline:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _produce(work: Callable[[], Iterable[Any]], out: queue.Queue[tuple[bool, Any]]) -> None:
    try:
        for item in work():
            out.put((True, item))
        out.put((False, None))
    except BaseException as exc:  # handed to the watching thread, which raises it
        out.put((False, exc))


def _check_devices(devices: int, cores_per_device: int, budgets: list[float | None] | None) -> None:
    if devices < 1 or cores_per_device < 1:
        raise ConfigError("devices and cores per device must be >= 1", hint="e.g. --devices 2")
    if budgets is not None and len(budgets) != devices:
        raise ConfigError(f"{len(budgets)} memory budgets for {devices} devices", hint="give one per device")


def _fenced(pipeline: LocalPipeline, fenced: list[float | None] | None, pin: bool) -> LocalPipeline:
    pipeline.fences, pipeline.unenforced = memory_fences(fenced)
    if pin:
        pin_to(device_cores(0, pipeline.cores_per_device))
    return pipeline


def launch_devices(
    devices: int, *, cores_per_device: int = 1, budgets: list[float | None] | None = None,
    device: str | None = None, pin: bool = False,
) -> LocalPipeline:  # fmt: skip
    """Devices 1 … ``devices - 1`` started here as workers on their own cores, with a
    memory cgroup per device where ``budgets`` (bytes, one per device) are given and the OS
    can enforce them (device 0's holds this process from the load on). ``pin``: this
    process too on device 0's cores (the CLI's choice; a library caller's threads stay)."""
    _check_devices(devices, cores_per_device, budgets)
    device = device or "cpu"
    master, token = f"127.0.0.1:{free_loopback_port()}", secrets.token_hex(16)
    pipeline = _fenced(LocalPipeline(master, token, devices, device, cores_per_device, budgets), budgets, pin)
    try:
        pipeline.workers = spawn_local_workers(
            devices, master, token, cores_per_device=cores_per_device, device=device
        )
    except BaseException:
        pipeline.stop()
        raise
    return pipeline


def await_devices(
    listen: str, devices: int, *, token: str | None = None, cores_per_device: int = 1,
    budgets: list[float | None] | None = None, device: str | None = None, pin: bool = False,
) -> LocalPipeline:  # fmt: skip
    """Device 0 of devices started on other hosts (``coinfer edge worker --master LISTEN``
    with the same ``token``, by default ``$COINFER_EDGE_TOKEN``): nothing starts here;
    ``budgets`` plan every device, and only device 0's is fenced here (each worker holds
    its own with ``--memory``)."""
    token = token or os.environ.get("COINFER_EDGE_TOKEN", "")
    if not token:
        raise ConfigError(
            "the devices need a shared secret",
            hint="export COINFER_EDGE_TOKEN=<random> here and on every device",
        )
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"listen at HOST:PORT, got {listen!r}", hint="e.g. --listen 0.0.0.0:29500")
    if devices < 2:
        raise ConfigError("a listening device 0 waits for other devices: give 2 or more")
    _check_devices(devices, cores_per_device, budgets)
    pipeline = LocalPipeline(listen, token, devices, device or "cpu", cores_per_device, budgets)
    return _fenced(pipeline, budgets[:1] if budgets else None, pin)


def _connected(pipeline: LocalPipeline, model: str, **options: Any) -> LocalPipeline:
    try:
        pipeline.connect(model, **options)
    except BaseException:
        pipeline.close()
        raise
    return pipeline


def start_local_pipeline(
    model: str, *, devices: int = 2, cores_per_device: int = 1, n_ctx: int = 4096, kv: str | None = None,
    device: str | None = None, dtype: str | None = None, budgets: list[float | None] | None = None,
    split: str = "jupiter",
) -> LocalPipeline:  # fmt: skip
    """``model`` served by ``devices`` devices on this host (see the module); returns once
    every device has joined, profiled and loaded its planned layers. ``kv`` and ``device``:
    as ``placement`` chooses by default; ``budgets``: bytes per device, planned for and
    held by the OS where it can (``LocalPipeline.memory`` says)."""
    pipeline = launch_devices(devices, cores_per_device=cores_per_device, budgets=budgets, device=device)
    return _connected(pipeline, model, n_ctx=n_ctx, kv=kv, dtype=dtype, split=split)


def join_pipeline(
    model: str, *, listen: str, devices: int, token: str | None = None, cores_per_device: int = 1,
    n_ctx: int = 4096, kv: str | None = None, device: str | None = None, dtype: str | None = None,
    budgets: list[float | None] | None = None, split: str = "jupiter",
) -> LocalPipeline:  # fmt: skip
    """Device 0 of a pipeline whose other ``devices - 1`` devices run elsewhere
    (``await_devices``), planned and loaded as ``start_local_pipeline`` does; it starts no
    process, and ``close`` ends none."""
    pipeline = await_devices(
        listen, devices, token=token, cores_per_device=cores_per_device, budgets=budgets, device=device
    )
    return _connected(pipeline, model, n_ctx=n_ctx, kv=kv, dtype=dtype, split=split)
