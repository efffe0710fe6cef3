"""A device after rank 0: it joins the group, proves nothing is amiss with the token, and
then does what rank 0's control messages say, answering each:

- ``profile``: this device's profile for the model (cached; ``profile.py``);
- ``link_send`` / ``link_echo``: measure the link to a neighbouring rank;
- ``load``: read this device's layer range (only those weights);
- ``serve``: one request through the pipeline (``pipeline.serve``); the answer is what
  it sent and computed, and its peak memory;
- ``bye``: leave.

A failure here is answered as ``{"error": ..., "hint": ...}`` so rank 0 can name this device.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from typing import Any

from coinfer.decoding.sampling import SamplingParams
from coinfer.engines.jupiter.branches import BranchVerifier
from coinfer.engines.jupiter.pipeline import Answerer, Picker
from coinfer.engines.jupiter.profile import device_memory, echo_link, measure_link, profile_device
from coinfer.engines.jupiter.relay import serve
from coinfer.engines.jupiter.stage import Stage
from coinfer.engines.jupiter.static_stage import StaticStage, open_stage
from coinfer.engines.jupiter.tree_pipeline import TreeVerifier
from coinfer.engines.jupiter.wire import check_request, check_token, join, leave, recv_json, send_json
from coinfer.errors import CoinferError, TransportError

__all__ = ["peak_rss_bytes", "reset_peak_rss", "run_worker", "worker_command"]


def worker_command(
    rank: int, world: int, master: str, cores: list[int], name: str, device: str = "cpu",
    dtype: str | None = None,
) -> list[str]:  # fmt: skip
    """The command that runs device ``rank`` as a ``coinfer edge worker`` process here."""
    import sys

    return [
        sys.executable, "-m", "coinfer", "edge", "worker", "--rank", str(rank), "--world", str(world),
        "--master", master, "--cores", ",".join(map(str, cores)), "--name", name, "--device", device,
        *(["--dtype", dtype] if dtype else []),
    ]  # fmt: skip


def peak_rss_bytes() -> int:
    """This process's peak resident memory since it started or since ``reset_peak_rss``
    (``VmHWM``: ``ru_maxrss`` would carry a forking parent's peak over ``exec``)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def reset_peak_rss() -> None:
    """Start ``peak_rss_bytes`` afresh (Linux's ``clear_refs``), for a process that was
    something else before it became a device."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


class _Device:
    def __init__(
        self,
        rank: int,
        world: int,
        name: str,
        threads: int,
        before_load: Callable[[], None] | None,
        device: str = "cpu",
        dtype: str | None = None,
    ) -> None:
        self.rank, self.world, self.name, self.threads, self.device = rank, world, name, threads, device
        self.dtype = dtype  # this device's own choice, before rank 0's
        self.before_load = before_load
        self.stage: Stage | StaticStage | None = None
        self.heads: Any = None
        self.folder: str | None = None
        self.base_bytes = peak_rss_bytes()

    def handle(self, msg: dict[str, Any]) -> dict[str, Any] | None:
        op = check_request(msg)
        if op == "profile":
            from coinfer.models.load import transformers_folder

            self.folder = str(transformers_folder(str(msg["model"])))
            prof = profile_device(
                self.folder, name=self.name, threads=self.threads, base_bytes=self.base_bytes,
                kv=str(msg.get("kv", "dynamic")), device=self.device, dtype=self._dtype(msg),
            )  # fmt: skip
            gpu = device_memory(self.device)  # a GPU stage's: its layers' memory, and which GPU
            return {"profile": prof.to_json(), "gpu": gpu and {"bytes": gpu[0], "id": gpu[1]}}
        if op == "link_send":
            link = measure_link(int(msg["peer"]))
            return {"latency_s": link.latency_s, "bytes_per_s": link.bytes_per_s}
        if op == "link_echo":
            echo_link(int(msg["peer"]))
            return {"ok": True}
        if op == "load":
            if self.folder is None:
                raise TransportError("rank 0 asked to load before naming the model")
            self.stage = None  # the old stage's memory goes first
            if self.before_load is not None:  # e.g. enter this device's memory cgroup, once
                self.before_load()
                self.before_load = None
            self.stage = open_stage(
                self.folder, int(msg["start"]), int(msg["stop"]), kv=str(msg.get("kv", "dynamic")),
                device=self.device, n_ctx=int(msg.get("n_ctx", 4096)), dtype=self._dtype(msg),
            )  # fmt: skip
            return {"ok": True, "peak_rss": peak_rss_bytes()}
        if op == "serve":
            return self._serve(msg)
        if op == "heads":
            self._receive_heads(int(msg["heads"]), int(msg["hidden"]), int(msg.get("vocab", 0)))
            return {"ok": True}
        return None  # bye

    def _dtype(self, msg: dict[str, Any]) -> str | None:
        """The stage's dtype: this device's own, else rank 0's, else the device's default."""
        asked = msg.get("dtype")
        return self.dtype or (None if asked is None else str(asked))

    def _receive_heads(self, k: int, hidden: int, vocab: int) -> None:
        """The heads' tensors, straight after the message that announced their shape, and
        the token ids they guess among (``vocab`` of them; 0: every token)."""
        import torch
        import torch.distributed as dist

        from coinfer.models.heads import DraftHeads, HeadsMeta

        if not (0 < k <= 64 and hidden > 0 and k * hidden * hidden <= 2**28):
            raise TransportError(f"rank 0 announced heads of an unlikely shape ({k} x {hidden})")
        if self.stage is None:
            raise TransportError("rank 0 sent heads before a layer range was loaded")
        size = int(self.stage.config.vocab_size)
        if not 0 <= vocab <= size:
            raise TransportError(f"rank 0 announced heads over {vocab} tokens; the model has {size}")
        weight, bias = torch.empty(k, hidden, hidden), torch.empty(k, hidden)
        dist.recv(weight, 0)
        dist.recv(bias, 0)
        ids = None
        if vocab:
            ids = torch.empty(vocab, dtype=torch.int64)
            dist.recv(ids, 0)
            if int(ids.min()) < 0 or int(ids.max()) >= size:
                raise TransportError("rank 0 sent heads whose token ids are outside the vocabulary")
        self.heads = DraftHeads(weight, bias, HeadsMeta("", "", hidden, k), ids)

    def _serve(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.stage is None:
            raise TransportError("rank 0 asked to serve before a layer range was loaded")
        self.stage.reset()
        sampling = SamplingParams.from_json(msg.get("sampling") or {})
        width = int(msg.get("tree_width") or 0)
        pick: Answerer | None = None
        if self.stage.last and width and self.heads is None:
            raise TransportError("rank 0 asked for speculative decoding before sending the heads")
        if self.stage.last and msg.get("branches"):
            pick = BranchVerifier(sampling, self.heads if width else None, max(width, 1))
        elif self.stage.last and width:
            pick = TreeVerifier(sampling, self.heads, width)
        elif self.stage.last:
            pick = Picker(sampling)
        traffic = serve(self.stage, self.rank, self.world, pick)
        return {**traffic.as_dict(), "peak_rss": peak_rss_bytes()}


def run_worker(
    rank: int,
    world: int,
    master: str,
    *,
    name: str,
    threads: int,
    budget: int | None = None,
    before_load: Callable[[], None] | None = None,
    device: str = "cpu",
    dtype: str | None = None,
) -> None:
    """Serve as device ``rank`` until rank 0 says ``bye`` (or goes away). ``budget``: this
    device's memory budget in bytes, told to rank 0, which plans the layers under it;
    ``before_load``: called once the plan fits, before the layers are read (the CLI enters
    a memory cgroup of the budget there); ``device``: where this device's stage runs (a
    GPU needs rank 0's ``kv="static"``); ``dtype``: its stage's (None: rank 0's choice, else
    the device's default; a dtype needs static caches too)."""
    import torch

    torch.set_num_threads(threads)
    join(rank, world, master)
    try:
        check_token(recv_json(0))
        me = _Device(rank, world, name, threads, before_load, device, dtype)
        send_json({"ok": True, "name": name, "threads": threads, "budget": budget}, 0)
        while True:
            msg = recv_json(0)
            try:
                reply = me.handle(msg)
            except CoinferError as exc:
                send_json({"error": str(exc).splitlines()[0], "hint": exc.hint}, 0)
                raise
            if reply is None:
                return
            send_json(reply, 0)
    finally:
        leave()
