"""Rank 0's handle on the devices (paper 004's master): it joins the group, gathers every
device's profile and the links between neighbours, plans the layers (Eq. 1, or exo's
memory-proportional split to compare), has every device load only its range, and then
serves requests (``engine.stream``). Layer plans are cached per model, devices and
budgets; sequence plans per prompt length.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coinfer import catalog
from coinfer.engines.jupiter.pipeline import Traffic
from coinfer.engines.jupiter.planner import LayerPlan, SequencePlan, plan_layers, plan_sequence
from coinfer.engines.jupiter.profile import (
    DeviceProfile,
    LinkProfile,
    ModelShape,
    device_memory,
    measure_link,
    profile_device,
)
from coinfer.engines.jupiter.static_stage import check_placement, open_stage
from coinfer.engines.jupiter.wire import TOKEN_ENV, join, leave, recv_json, send_json
from coinfer.engines.jupiter.worker import peak_rss_bytes, reset_peak_rss
from coinfer.errors import ConfigError, TransportError
from coinfer.models.windows import refuse_window

__all__ = ["GPU_SHARE", "PLAN_PART", "EdgeCluster", "layer_budget", "memory_split", "share_gpus"]

PLAN_PART = (128, 256)  # the sub-sequence (tokens, earlier tokens) whose layer times Eq. 1 balances
SPLITS = ("jupiter", "memory")
GPU_SHARE = 0.9  # of a GPU's memory for a stage's layers and caches: the rest for graphs and activations


def memory_split(n_layers: int, memories: list[float]) -> tuple[tuple[int, int], ...]:
    """exo's partition: each device's share of the layers is its share of the memory."""
    total = sum(memories)
    edges, acc = [0], 0.0
    for i, m in enumerate(memories[:-1], start=1):
        acc += m
        lowest, highest = edges[-1] + 1, n_layers - (len(memories) - i)
        edges.append(min(max(round(n_layers * acc / total), lowest), highest))
    edges.append(n_layers)
    return tuple(zip(edges, edges[1:], strict=False))


def _check_options(
    world: int, split: str, budgets: list[float | None] | None, kv: str, device: str, dtype: str | None
) -> None:
    """``EdgeCluster``'s options, refused before any device joins."""
    import torch

    from coinfer.models.load import dtype_on

    check_placement(kv, device, dtype)
    dtype_on(torch, dtype, device)
    if split not in SPLITS:
        raise ConfigError(f"unknown layer split {split!r}", hint=f"choose one of {', '.join(SPLITS)}")
    if budgets is not None and len(budgets) != world:
        raise ConfigError(f"{len(budgets)} memory budgets for {world} devices", hint="give one per device")


@dataclass
class _Device:
    rank: int
    name: str
    threads: int
    profile: DeviceProfile | None = None
    layers: tuple[int, int] = (0, 0)
    peak_rss: int = 0
    gpu: tuple[int, str] | None = None  # a GPU stage's (memory there, the GPU's id); None: on the host


def layer_budget(
    budget: float | None, profile: DeviceProfile, device_bytes: int | None, value_bytes: int
) -> float | None:
    """What a device's layers may hold, counted in values of ``value_bytes`` (rank 0's
    stage's, the plan's unit): on a GPU (``device_bytes`` known), ``GPU_SHARE`` of its
    memory there (the host holds the process, and the weights pass through it one tensor
    at a time); else its ``budget`` less the process's own footprint (None: unlimited). A
    stage in another dtype than rank 0's holds a layer in proportionally more or fewer bytes."""
    if device_bytes is not None:
        room = GPU_SHARE * device_bytes
    elif budget is not None:
        room = budget - profile.base_bytes
    else:
        return None
    return room * value_bytes / profile.value_bytes


def share_gpus(gpus: list[tuple[int, str] | None]) -> list[int | None]:
    """Each device's share of its GPU's memory (None: its stage is on the host): stages on
    one GPU (devices of one machine) split it evenly."""
    sharers = Counter(g[1] for g in gpus if g is not None)
    return [None if g is None else g[0] // sharers[g[1]] for g in gpus]


def _profile_reply(reply: dict[str, Any], rank: int) -> tuple[DeviceProfile, tuple[int, str] | None]:
    """A worker's profile and its GPU stage's memory and GPU, checked."""
    gpu = reply.get("gpu")
    if gpu is None:
        return DeviceProfile.from_json(reply["profile"]), None
    room, name = (gpu.get("bytes"), gpu.get("id")) if isinstance(gpu, dict) else (None, None)
    if not isinstance(room, int) or room <= 0 or not isinstance(name, str) or not 0 < len(name) <= 200:
        raise TransportError(f"device {rank} reported its GPU as {str(gpu)[:80]}")
    return DeviceProfile.from_json(reply["profile"]), (room, name)


class EdgeCluster:
    """The devices of one pipeline, seen from rank 0 (this process, which is device 0)."""

    def __init__(
        self,
        model: str,
        *,
        world: int,
        master: str,
        threads: int,
        name: str = "device0",
        budgets: list[float | None] | None = None,
        split: str = "jupiter",
        n_ctx: int = 4096,
        token: str | None = None,
        before_load: Callable[[], None] | None = None,
        kv: str = "dynamic",
        device: str = "cpu",
        dtype: str | None = None,
    ) -> None:
        import os

        from coinfer.models.hf import HFTokenizer
        from coinfer.models.load import transformers_folder

        _check_options(world, split, budgets, kv, device, dtype)
        import torch

        torch.set_num_threads(threads)  # this process is device 0: profiled and run on these
        self.model, self.world, self.split, self.n_ctx = model, world, split, n_ctx
        # device 0's; every device's stage takes ``kv`` and ``dtype`` (None: its device's default)
        self.kv, self.device, self.dtype = kv, device, dtype
        self.budgets: list[float | None] = list(budgets) if budgets is not None else [None] * world
        self.folder = transformers_folder(model)
        self.text = HFTokenizer.load(self.folder, name=model)
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(self.folder)
        self.n_ctx = min(n_ctx, int(getattr(config, "max_position_embeddings", None) or n_ctx))
        refuse_window(config, self.n_ctx, "a Jupiter pipeline")
        self.devices = [_Device(0, name, threads)]
        self.links: list[LinkProfile] = []
        self._plans: dict[tuple[int, int, int, int], SequencePlan] = {}
        self.heads: Any = None  # DraftHeads, once use_heads gave them
        self._joined = False
        reset_peak_rss()
        if world > 1:
            join(0, world, master)
            self._joined = True
            self._hello(token if token is not None else os.environ.get(TOKEN_ENV, ""))
        self._profile()
        assert self.devices[0].profile is not None
        # the plan's memory is counted in values of rank 0's stage; other devices' budgets convert
        self.value_bytes = self.devices[0].profile.value_bytes
        self.shape = ModelShape.of(config, self.value_bytes)
        self.layer_plan = self._plan_layers()
        if before_load is not None:  # the plan fits: e.g. hold every device to its budget now
            before_load()
        self._load()

    # ---- setting up --------------------------------------------------------------------
    def _ask(self, rank: int) -> dict[str, Any]:
        reply = recv_json(rank)
        if "error" in reply:
            hint = reply.get("hint")
            hint = hint if isinstance(hint, str) else None
            raise TransportError(f"device {rank}: {reply['error']}", hint=hint)
        return reply

    def _hello(self, token: str) -> None:
        for rank in range(1, self.world):
            send_json({"token": token}, rank)
        for rank in range(1, self.world):
            reply = self._ask(rank)
            self.devices.append(_Device(rank, str(reply["name"]), int(reply["threads"])))
            own = reply.get("budget")  # a device started with its own --memory
            if own is not None:
                given = self.budgets[rank]
                self.budgets[rank] = float(own) if given is None else min(given, float(own))

    def _profile(self) -> None:
        me = self.devices[0]
        me.profile = profile_device(
            self.folder, name=me.name, threads=me.threads, base_bytes=peak_rss_bytes(),
            kv=self.kv, device=self.device, dtype=self.dtype,
        )  # fmt: skip
        me.gpu = device_memory(self.device)
        # each as its stage will run (the cache kind, the dtype; a worker's own device)
        ask = {"op": "profile", "model": self.model, "kv": self.kv}
        if self.dtype is not None:
            ask["dtype"] = self.dtype
        for rank in range(1, self.world):  # one at a time: each device's own speed, undisturbed
            send_json(ask, rank)
            d = self.devices[rank]
            d.profile, d.gpu = _profile_reply(self._ask(rank), rank)
        for rank in range(self.world - 1):
            send_json({"op": "link_echo", "peer": rank}, rank + 1)
            if rank == 0:
                self.links.append(measure_link(1))
            else:
                send_json({"op": "link_send", "peer": rank + 1}, rank)
                got = self._ask(rank)
                self.links.append(LinkProfile(float(got["latency_s"]), float(got["bytes_per_s"])))
            self._ask(rank + 1)

    def _layer_inputs(self) -> tuple[list[list[float]], list[float], list[float | None]]:
        """Eq. 1's inputs: layer times per device (a prompt's sub-sequence), memory per layer (its KV for the
        context included; the embedding on the first, the head on the last), budgets
        less each process's own footprint."""
        s = self.shape
        times = []
        for d in self.devices:  # the head reads one token of a prompt: no part of the balance
            assert d.profile is not None
            times.append([float(d.profile.q(*PLAN_PART))] * s.n_layers)
        layer_bytes = [float(s.layer_bytes + s.kv_bytes_per_token * self.n_ctx)] * s.n_layers
        layer_bytes[0] += s.embed_bytes
        layer_bytes[-1] += s.head_bytes
        budgets = []
        for budget, d, share in zip(self.budgets, self.devices, self._gpu_shares(), strict=True):
            assert d.profile is not None
            budgets.append(layer_budget(budget, d.profile, share, self.value_bytes))
        return times, layer_bytes, budgets

    def _gpu_shares(self) -> list[int | None]:
        return share_gpus([d.gpu for d in self.devices])

    def _plan_layers(self) -> LayerPlan:
        times, layer_bytes, budgets = self._layer_inputs()
        if self.split == "memory":
            own = [  # a GPU stage's memory is its GPU's
                b if g is None else g for b, g in zip(self.budgets, self._gpu_shares(), strict=True)
            ]
            known = all(m is not None for m in own)  # else: equal shares
            memories = [m if known and m is not None else 1.0 for m in own]
            ranges = memory_split(self.shape.n_layers, [float(m) for m in memories])
            stage_s = tuple(sum(times[d][a:b]) for d, (a, b) in enumerate(ranges))
            return LayerPlan(ranges, stage_s, max(stage_s))
        path = self._plan_path(times, layer_bytes, budgets)
        if path.is_file():
            obj = json.loads(path.read_text())
            return LayerPlan(
                tuple(tuple(r) for r in obj["ranges"]), tuple(obj["stage_s"]), obj["bottleneck_s"]
            )  # type: ignore[arg-type]
        plan = plan_layers(times, layer_bytes, budgets)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps({"ranges": plan.ranges, "stage_s": plan.stage_s, "bottleneck_s": plan.bottleneck_s})
        )
        return plan

    def _plan_path(self, *inputs: Any) -> Path:
        key = hashlib.sha256(json.dumps([str(self.folder), *inputs]).encode()).hexdigest()[:16]
        return catalog.cache_dir() / "jupiter" / "plans" / f"{key}.json"

    def _load(self) -> None:
        ranges = self.layer_plan.ranges
        for rank in range(1, self.world):
            start, stop = ranges[rank]
            load = {"op": "load", "start": start, "stop": stop, "kv": self.kv, "n_ctx": self.n_ctx}
            send_json(load if self.dtype is None else {**load, "dtype": self.dtype}, rank)
        self.stage = open_stage(
            self.folder, *ranges[0], kv=self.kv, device=self.device, n_ctx=self.n_ctx, dtype=self.dtype
        )
        self.devices[0].peak_rss = peak_rss_bytes()
        for rank in range(1, self.world):
            self.devices[rank].peak_rss = int(self._ask(rank)["peak_rss"])
        for d, r in zip(self.devices, ranges, strict=True):
            d.layers = r

    # ---- serving -----------------------------------------------------------------------
    def min_part(self) -> int:
        """Eq. 3's minimum sub-sequence: the shortest profiled length whose time per token
        is within 25% of the device's best (shorter ones leave the device under-used)."""
        worst = 1
        for d in self.devices:
            assert d.profile is not None
            per_token = [t / n for n, t in zip(d.profile.lengths, d.profile.layer_s[0], strict=True)]
            best = min(per_token)
            worst = max(
                worst, next(n for n, v in zip(d.profile.lengths, per_token, strict=True) if v <= 1.25 * best)
            )
        return worst

    def stage_q(self, x: Any, p: Any) -> Any:
        """One sub-sequence's time on the slowest stage, the link to the next included."""
        import numpy as np

        worst = None
        for i, d in enumerate(self.devices):
            assert d.profile is not None
            t = (d.layers[1] - d.layers[0]) * d.profile.q(x, p)
            if i < len(self.links):
                t = (
                    t
                    + self.links[i].latency_s
                    + np.asarray(x) * self.shape.hidden * 4 / self.links[i].bytes_per_s
                )
            worst = t if worst is None else np.maximum(worst, t)
        return worst

    def sequence_plan(
        self, length: int, *, min_part: int | None, max_parts: int | None, exactly: int | None = None
    ) -> SequencePlan:
        key = (length, min_part or 0, max_parts or 0, exactly or 0)
        if key not in self._plans:
            self._plans[key] = plan_sequence(
                self.stage_q,
                length,
                min_len=min_part or self.min_part(),
                n_devices=self.world,
                max_parts=max_parts,
                exactly=exactly,
            )
        return self._plans[key]

    def use_heads(self, heads: Any) -> None:
        """Self-drafting heads (``models.heads.DraftHeads``) for speculative decoding: they
        go to the last device (as tensors over the group, never pickled), which runs them.
        Heads trained for another model are refused."""
        from coinfer.models.heads import config_digest

        if heads.meta.digest != config_digest(self.folder):
            raise ConfigError(
                f"the heads were trained for {heads.meta.model}, not {self.model}",
                hint="train heads for this model with coinfer edge train-heads",
            )
        self.heads = heads
        if self.world > 1:
            import torch.distributed as dist

            last = self.world - 1
            vocab = 0 if heads.vocab is None else len(heads.vocab)
            shape = {"heads": heads.meta.heads, "hidden": heads.meta.hidden, "vocab": vocab}
            send_json({"op": "heads", **shape}, last)
            dist.send(heads.weight.float().contiguous(), last)
            dist.send(heads.bias.float().contiguous(), last)
            if vocab:
                dist.send(heads.vocab.long().contiguous(), last)
            self._ask(last)

    def begin(self, sampling: dict[str, Any], *, tree_width: int = 0, branches: bool = False) -> None:
        """Every worker resets its cache and serves one request (``tree_width`` > 0: with
        the heads' trees of that width; ``branches``: outline decoding's branches)."""
        self.stage.reset()
        for rank in range(1, self.world):
            send_json(
                {"op": "serve", "sampling": sampling, "tree_width": tree_width, "branches": branches}, rank
            )

    def finish(self, traffic: Traffic) -> list[dict[str, Any]]:
        """After ``STOP``: what each device sent, computed and held at its peak."""
        self.devices[0].peak_rss = peak_rss_bytes()
        reports = [{**traffic.as_dict(), "peak_rss": self.devices[0].peak_rss}]
        for rank in range(1, self.world):
            reports.append(self._ask(rank))
            self.devices[rank].peak_rss = int(reports[-1]["peak_rss"])
        return [
            {"rank": d.rank, "name": d.name, "threads": d.threads, "layers": list(d.layers), **r}
            for d, r in zip(self.devices, reports, strict=True)
        ]

    def layout(self) -> list[dict[str, Any]]:
        """Each device's place in the pipeline (its layers) and its peak memory as last
        reported: what a request of a run shares with the run's others (``finish`` adds
        each device's traffic, which is the run's)."""
        return [
            {"rank": d.rank, "name": d.name, "threads": d.threads, "layers": list(d.layers),
             "peak_rss": d.peak_rss}
            for d in self.devices
        ]  # fmt: skip

    def close(self) -> None:
        stage = self.__dict__.pop("stage", None)  # released once, however often close is called
        if stage is not None:
            stage.release()
        if self._joined:
            try:
                for rank in range(1, self.world):
                    send_json({"op": "bye"}, rank)
                time.sleep(0.05)
            except RuntimeError:
                pass  # a device already gone
            leave()
            self._joined = False
