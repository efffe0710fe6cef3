"""Jupiter's offline profile (paper 004 §IV-B): what the planner needs to know of a device
and a model.

- ``layer_s[p][n]``: seconds one decoder layer takes on this device for ``n`` tokens after
  ``p`` tokens already in its cache (measured on layers built from the model's config, with
  the device's own threads, as its stage will run them: transformers' layer on a dynamic
  cache, or a static-cache stage on its device and dtype, CUDA graphs included on a GPU);
  ``q(x, p)`` interpolates it;
- ``head_s``: the final norm and head for one token (on the stage's device and dtype);
- memory from the config: a layer's parameters, its KV cache per token, the embedding and
  the head; ``base_bytes``: what the worker process holds before any weight;
- a link's latency and bandwidth, measured between neighbouring ranks (``measure_link``).

A device's profile is cached per model and device name (``<cache>/jupiter/``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from coinfer import catalog
from coinfer.errors import ConfigError

__all__ = [
    "DeviceProfile",
    "LinkProfile",
    "ModelShape",
    "device_memory",
    "echo_link",
    "measure_link",
    "profile_device",
    "profile_path",
    "seconds_per_run",
]

LENGTHS = (1, 16, 64, 128, 256, 512)
CACHED = (0, 512, 1024)
WINDOW_S = 0.3  # each point is the mean over this long: a CPU quota's throttling shows


@dataclass(frozen=True)
class ModelShape:
    """Memory of a model's parts in the stages' dtype (``value_bytes`` a value: 4 for
    float32, 2 for bfloat16), from its config."""

    n_layers: int
    hidden: int
    layer_bytes: int
    kv_bytes_per_token: int  # per layer
    embed_bytes: int
    head_bytes: int

    @classmethod
    def of(cls, config: Any, value_bytes: int = 4) -> ModelShape:
        """Counted on the model's skeleton (no memory): what each part's tensors hold, each
        value ``value_bytes`` (the weights and the KV cache alike)."""
        import torch

        from coinfer.models.layer_range import skeleton

        b = value_bytes
        model = skeleton(config, torch.float32)
        inner = model.model
        hidden = int(config.hidden_size)
        heads = int(config.num_attention_heads)
        kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        return cls(
            n_layers=len(inner.layers),
            hidden=hidden,
            layer_bytes=b * sum(p.numel() for p in inner.layers[0].parameters()),
            kv_bytes_per_token=b * 2 * kv_heads * head_dim,
            embed_bytes=b * inner.embed_tokens.weight.numel(),
            head_bytes=b * (model.lm_head.weight.numel() + hidden),
        )


@dataclass(frozen=True)
class DeviceProfile:
    name: str
    threads: int
    lengths: tuple[int, ...]
    cached: tuple[int, ...]
    layer_s: tuple[tuple[float, ...], ...]  # [cached][lengths]
    head_s: float
    base_bytes: int
    stage: str = "dynamic"  # what was timed: "dynamic", or "static DEVICE DTYPE"

    @property
    def value_bytes(self) -> int:
        """Bytes of a weight or cache value in the stage this profile timed (4 on dynamic
        caches, float32; a static stage's dtype's)."""
        if self.stage == "dynamic":
            return 4
        import torch

        from coinfer.models.load import DTYPES

        dtype = self.stage.rsplit(" ", 1)[-1]
        if not self.stage.startswith("static ") or dtype not in DTYPES:
            raise ConfigError(
                f"device {self.name} timed a stage this coinfer does not know: {self.stage[:60]!r}",
                hint="run the same coinfer version on every device",
            )
        return int(getattr(torch, dtype).itemsize)

    def q(self, x: Any, p: Any) -> np.ndarray:
        """Seconds per layer for ``x`` tokens after ``p`` cached (arrays broadcast):
        piecewise linear in both, extended linearly past the grid."""
        x, p = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(p, dtype=np.float64))
        rows = np.stack([_linear(x, self.lengths, row) for row in self.layer_s])  # (cached, ...)
        return np.maximum(_linear_rows(p, self.cached, rows), 1e-7)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DeviceProfile:
        return cls(
            name=str(obj["name"]),
            threads=int(obj["threads"]),
            lengths=tuple(int(v) for v in obj["lengths"]),
            cached=tuple(int(v) for v in obj["cached"]),
            layer_s=tuple(tuple(float(v) for v in row) for row in obj["layer_s"]),
            head_s=float(obj["head_s"]),
            base_bytes=int(obj["base_bytes"]),
            stage=str(obj.get("stage", "dynamic")),
        )


@dataclass(frozen=True)
class LinkProfile:
    latency_s: float
    bytes_per_s: float

    def seconds(self, n_bytes: float) -> float:
        return self.latency_s + n_bytes / self.bytes_per_s


def _linear(x: np.ndarray, grid: Sequence[int], values: Sequence[float]) -> np.ndarray:
    g, v = np.asarray(grid, dtype=np.float64), np.asarray(values, dtype=np.float64)
    inside = np.interp(x, g, v)
    lo = v[0] + (x - g[0]) * (v[1] - v[0]) / (g[1] - g[0])
    hi = v[-1] + (x - g[-1]) * (v[-1] - v[-2]) / (g[-1] - g[-2])
    return np.where(x < g[0], lo, np.where(x > g[-1], hi, inside))


def _linear_rows(p: np.ndarray, grid: Sequence[int], rows: np.ndarray) -> np.ndarray:
    """Along the first axis of ``rows`` (one row per ``grid`` point), at ``p``."""
    g = np.asarray(grid, dtype=np.float64)
    i = np.clip(np.searchsorted(g, p, side="right") - 1, 0, len(g) - 2)
    w = (p - g[i]) / (g[i + 1] - g[i])
    lower = np.take_along_axis(rows, i[None], axis=0)[0]
    upper = np.take_along_axis(rows, (i + 1)[None], axis=0)[0]
    return lower + w * (upper - lower)


def _processor() -> str:
    """What the device computes on: the CPU's model name (a cache carried to another
    machine, or a VM moved to other hardware, profiles again)."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu(device: str) -> str:
    """The GPU's model name, for a ``cuda`` device."""
    import torch

    return str(torch.cuda.get_device_name(torch.device(device)))


def device_memory(device: str) -> tuple[int, str] | None:
    """The memory a stage on ``device`` may take there, and which GPU that is (its UUID:
    stages on one GPU share it): what is free on it plus what this process's allocator holds
    unused (a profile's freed buffers). None on the CPU, whose budget is the host's
    (``--memory``)."""
    if device == "cpu":
        return None
    import socket

    import torch

    gpu = torch.device(device)
    free, _ = torch.cuda.mem_get_info(gpu)
    room = int(free) + int(torch.cuda.memory_reserved(gpu)) - int(torch.cuda.memory_allocated(gpu))
    uuid = getattr(torch.cuda.get_device_properties(gpu), "uuid", None)
    return room, str(uuid) if uuid else f"{socket.gethostname()}/{gpu}"


def profile_path(
    folder: Path,
    name: str,
    threads: int,
    *,
    kv: str = "dynamic",
    device: str = "cpu",
    dtype: str | None = None,
) -> Path:
    """Per model (its folder's name and its config's digest: two folders of one name are
    two models), device, processor and the stage's kind (a static-cache stage: its device's
    processor and its dtype too); the window is in the name, so a change of method
    re-profiles."""
    config = folder / "config.json"
    digest = hashlib.sha256(config.read_bytes() if config.is_file() else b"").hexdigest()[:8]
    processor = _processor() if device == "cpu" else _gpu(device)
    cpu = hashlib.sha256(processor.encode()).hexdigest()[:6]
    kind = "" if kv == "dynamic" else "-" + _stage_name(kv, device, dtype).replace(" ", "-")
    raw = f"{folder.name}-{digest}-{name}-{cpu}-{threads}t-w{int(WINDOW_S * 1000)}{kind}"
    key = "".join(c if c.isalnum() or c in "-_." else "_" for c in raw)
    return catalog.cache_dir() / "jupiter" / "profiles" / f"{key}.json"


def profile_device(
    folder: str | Path,
    *,
    name: str,
    threads: int,
    base_bytes: int,
    fresh: bool = False,
    kv: str = "dynamic",
    device: str = "cpu",
    dtype: str | None = None,
) -> DeviceProfile:
    """This device's profile for the model in ``folder`` (from the cache unless ``fresh``),
    timed as its stage will run: ``kv`` "dynamic" (transformers' layer, the CPU, float32) or
    "static" (a static-cache stage on ``device`` in ``dtype``, its default by None)."""
    from coinfer.engines.jupiter.static_stage import check_placement

    check_placement(kv, device, dtype)  # a kind it does not know is refused, not timed as static
    folder = Path(folder)
    path = profile_path(folder, name, threads, kv=kv, device=device, dtype=dtype)
    stage = _stage_name(kv, device, dtype)
    if path.is_file() and not fresh:  # the path is the stage's kind's
        return replace(DeviceProfile.from_json(json.loads(path.read_text())), stage=stage)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    layer_s = _time_layer(config) if kv == "dynamic" else _time_static_layer(config, device, dtype)
    profile = DeviceProfile(
        name, threads, LENGTHS, CACHED, layer_s, _time_head(config, device, dtype), base_bytes, stage
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(profile.to_json()))
    return profile


def _random_layers(config: Any, start: int, stop: int, dtype: Any) -> Any:
    """The ``*ForCausalLM`` of ``config`` cut to layers ``[start, stop)`` of a model of
    ``stop + 1`` (so no embedding, final norm or head), their weights random (timing does
    not depend on values), on the CPU, its positions long enough for the profile's grid."""
    import torch

    from coinfer.models.layer_range import keep_layers, materialize_buffers, skeleton

    config, n_layers = copy.deepcopy(config), stop + 1
    kinds = list(getattr(config, "layer_types", None) or ["full_attention"])
    config.num_hidden_layers, config.layer_types = n_layers, (kinds * n_layers)[:n_layers]
    longest = max(CACHED) + max(LENGTHS)
    config.max_position_embeddings = max(int(getattr(config, "max_position_embeddings", 0) or 0), longest + 1)
    model = skeleton(config, dtype)
    keep_layers(model, start, stop)
    model.model.embed_tokens = None
    model.model.layers.to_empty(device="cpu")
    with torch.no_grad():
        for p in model.model.layers.parameters():
            p.normal_(0.0, 0.02)
    materialize_buffers(model)
    return model


def seconds_per_run(run: Callable[[], Any], window_s: float = WINDOW_S) -> float:
    """The mean time of ``run`` over at least ``window_s`` (after one untimed run). A
    device under a CPU quota (CFS periods of 100 ms) runs short bursts at full speed: the
    best of a few bursts would plan it as fast as an unthrottled one."""
    run()
    count, t0 = 0, time.perf_counter()
    while True:
        run()
        count += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= window_s:
            return elapsed / count


def _time_layer(config: Any) -> tuple[tuple[float, ...], ...]:
    import torch
    from transformers import DynamicCache

    inner = _random_layers(config, 0, 1, torch.float32).model
    hidden = int(config.hidden_size)
    rows = []
    with torch.inference_mode():
        for p in CACHED:
            cache = DynamicCache(config=inner.config)
            if p:
                inner(inputs_embeds=torch.randn(1, p, hidden), past_key_values=cache, use_cache=True)

            def step(n: int, p: int = p, cache: Any = cache) -> None:
                x, pos = torch.randn(1, n, hidden), torch.arange(p, p + n).unsqueeze(0)
                inner(inputs_embeds=x, position_ids=pos, past_key_values=cache, use_cache=True)
                cache.crop(p - cache.get_seq_length())  # this transformers removes a count

            rows.append(tuple(seconds_per_run(functools.partial(step, n)) for n in LENGTHS))
    return tuple(rows)


def _stage_name(kv: str, device: str, dtype: str | None) -> str:
    """What a profile times: "dynamic", or "static DEVICE DTYPE" (the dtype resolved)."""
    if kv == "dynamic":
        return "dynamic"
    import torch

    from coinfer.models.load import dtype_on

    return f"static {device} {str(dtype_on(torch, dtype, device)).removeprefix('torch.')}"


# ---- a static-cache stage's layer and head, as ``StaticStage`` runs them ----------------------
_LAYERS = 2  # the timed stage's layers (a middle stage of a model of _LAYERS + 2)


def _random_middle_stage(config: Any, device: str, dtype: str | None) -> Any:
    """A middle ``StaticStage`` of ``_LAYERS`` layers of ``config`` with random weights on
    ``device`` (timing does not depend on the values), its cache long enough for the grid."""
    import torch

    from coinfer.engines.jupiter.static_stage import StaticStage
    from coinfer.models.load import dtype_on

    model = _random_layers(config, 1, 1 + _LAYERS, dtype_on(torch, dtype, device)).to(device)
    n_ctx = max(CACHED) + max(LENGTHS) + 1
    return StaticStage(model, 1, 1 + _LAYERS, n_layers=_LAYERS + 2, n_ctx=n_ctx)


def _time_static_layer(config: Any, device: str, dtype: str | None) -> tuple[tuple[float, ...], ...]:
    """``layer_s[p][n]``: seconds a layer of a static-cache stage takes for ``n`` tokens
    after ``p`` cached: a two-layer middle stage's forward over two (hidden states in from
    the host, out to it as float32, as a middle stage's go on the wire; half of that fixed
    cost is charged to each layer)."""
    import torch

    stage = _random_middle_stage(config, device, dtype)
    hidden = int(config.hidden_size)
    inputs = {n: torch.randn(1, n, hidden) for n in {*LENGTHS, *CACHED}}  # made once, not timed
    rows = []
    with torch.inference_mode():
        for p in CACHED:
            stage.reset()
            if p:
                stage.forward(inputs[p], 0)

            def step(n: int, p: int = p) -> None:
                stage.forward(inputs[n], p)  # its output comes to the host: a sync
                stage.truncate(p)

            rows.append(tuple(seconds_per_run(functools.partial(step, n)) / _LAYERS for n in LENGTHS))
    stage.release()
    return tuple(rows)


def _time_head(config: Any, device: str = "cpu", dtype: str | None = None, share: int = 8) -> float:
    """The head for one token on ``device`` in ``dtype`` (by default the device's), timed
    on a ``1/share`` slice of it and scaled (waiting for a GPU each time)."""
    import torch

    from coinfer.models.load import dtype_on

    kind = dtype_on(torch, dtype, device)
    hidden, vocab = int(config.hidden_size), int(config.vocab_size)
    w = torch.randn(max(vocab // share, 1), hidden, dtype=kind, device=device)
    x = torch.randn(1, hidden, dtype=kind, device=device)

    def run() -> None:
        torch.nn.functional.linear(x, w)
        if w.device.type == "cuda":
            torch.cuda.synchronize(w.device)

    with torch.inference_mode():
        seconds = seconds_per_run(run)
    return seconds * vocab / w.shape[0]


PROBE_BYTES = (4 << 10, 4 << 20)


def measure_link(peer: int) -> LinkProfile:
    """Send probes of ``PROBE_BYTES`` to ``peer`` (which runs ``echo_link``), each
    answered with one byte; fit latency and bandwidth to the round-trip times."""
    import torch
    import torch.distributed as dist

    ack = torch.empty(1, dtype=torch.uint8)
    times = []
    for size in PROBE_BYTES:
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            dist.send(torch.zeros(size, dtype=torch.uint8), peer)
            dist.recv(ack, peer)
            best = min(best, time.perf_counter() - t0)
        times.append(best)
    (s1, s2), (t1, t2) = PROBE_BYTES, times
    bandwidth = (s2 - s1) / max(t2 - t1, 1e-9)
    return LinkProfile(latency_s=max((t1 - s1 / bandwidth) / 2, 0.0), bytes_per_s=bandwidth)


def echo_link(peer: int) -> None:
    """The other end of ``measure_link``."""
    import torch
    import torch.distributed as dist

    for size in PROBE_BYTES:
        for _ in range(3):
            dist.recv(torch.empty(size, dtype=torch.uint8), peer)
            dist.send(torch.ones(1, dtype=torch.uint8), peer)
