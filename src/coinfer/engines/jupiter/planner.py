"""Jupiter's parallelism planning (paper 004, §IV-B): which layers each device holds, and
how a prompt is cut into sub-sequences for intra-sequence pipelined prefill.

``plan_layers`` is Eq. 1: over the devices in their order, the contiguous layer ranges
whose slowest stage is fastest, where a device whose range (its parameters and KV cache)
does not fit its memory budget costs ``+inf``. Every device gets at least one layer.

``plan_sequence`` is Eq. 2-4: for a prompt of ``length`` tokens, ``W(y, k)`` is the
slowest sub-sequence of the best cut of the first ``y`` tokens into ``k`` parts, each at
least ``min_len`` tokens (shorter ones under-use the device, Eq. 3); a sub-sequence of
``x`` tokens after ``p`` earlier ones costs ``q(x, p)`` per stage, so later parts are
dearer. Of the ``k`` up to ``4 |D|``, the one minimising Eq. 4, ``sum h_i + (|D| - 1)
W(y, k)``, is the plan.

Both are exact dynamic programmes; ``exhaustive_layers`` and ``exhaustive_sequence``
enumerate every plan for tests and the bench's planner gap.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from coinfer.errors import ConfigError

__all__ = [
    "LayerPlan",
    "SequencePlan",
    "exhaustive_layers",
    "exhaustive_sequence",
    "plan_layers",
    "plan_sequence",
    "slowest_by_parts",
]

INF = math.inf


@dataclass(frozen=True)
class LayerPlan:
    """``ranges[d]``: the layers ``[start, stop)`` device ``d`` holds; ``stage_s``: each
    stage's time; ``bottleneck_s``: the slowest (Eq. 1's ``A(1 -> L, D)``)."""

    ranges: tuple[tuple[int, int], ...]
    stage_s: tuple[float, ...]
    bottleneck_s: float


@dataclass(frozen=True)
class SequencePlan:
    """``parts``: the sub-sequence lengths in order; ``h_s``: each one's time per stage;
    ``slowest_s``: ``W(y, k)``; ``latency_s``: Eq. 4's estimate of the whole prefill."""

    parts: tuple[int, ...]
    h_s: tuple[float, ...]
    slowest_s: float
    latency_s: float


def _stage_cost(
    times: np.ndarray, layer_bytes: np.ndarray, budgets: Sequence[float | None], d: int, i: int, j: int
) -> float:
    """``T(i -> j, d)``: device ``d`` running layers ``[i, j)``, ``+inf`` past its budget."""
    budget = budgets[d]
    if budget is not None and float(layer_bytes[i:j].sum()) > budget:
        return INF
    return float(times[d, i:j].sum())


def _check_layers(times: np.ndarray, layer_bytes: np.ndarray, budgets: Sequence[float | None]) -> None:
    n_dev, n_layers = times.shape
    if n_dev == 0 or n_layers < n_dev:
        raise ConfigError(f"{n_dev} devices cannot each hold a layer of a {n_layers}-layer model")
    if layer_bytes.shape != (n_layers,) or len(budgets) != n_dev:
        raise ConfigError("need one memory figure per layer and one budget per device")


def plan_layers(
    times: Sequence[Sequence[float]], layer_bytes: Sequence[float], budgets: Sequence[float | None]
) -> LayerPlan:
    """Eq. 1. ``times[d][l]``: seconds device ``d`` spends on layer ``l``; ``layer_bytes[l]``:
    the memory layer ``l`` needs (parameters and its KV cache); ``budgets[d]``: device
    ``d``'s memory (None: unlimited). ``ConfigError`` when no split fits the budgets."""
    t = np.asarray(times, dtype=np.float64)
    m = np.asarray(layer_bytes, dtype=np.float64)
    _check_layers(t, m, budgets)
    n_dev, n_layers = t.shape
    # best[n][y]: the slowest stage of the best split of layers [0, y) over devices 0..n
    best = np.full((n_dev, n_layers + 1), INF)
    cut = np.zeros((n_dev, n_layers + 1), dtype=np.int64)
    for y in range(1, n_layers + 1):
        best[0, y] = _stage_cost(t, m, budgets, 0, 0, y)
    for n in range(1, n_dev):
        for y in range(n + 1, n_layers + 1):
            for split in range(n, y):
                v = max(best[n - 1, split], _stage_cost(t, m, budgets, n, split, y))
                if v < best[n, y]:
                    best[n, y], cut[n, y] = v, split
    if not math.isfinite(best[n_dev - 1, n_layers]):
        raise ConfigError(
            "the model does not fit these devices' memory budgets in any split",
            hint="add a device, raise a budget, or use a smaller model",
        )
    bounds = [n_layers]
    for n in range(n_dev - 1, 0, -1):
        bounds.append(int(cut[n, bounds[-1]]))
    bounds.append(0)
    edges = bounds[::-1]
    ranges = tuple((edges[d], edges[d + 1]) for d in range(n_dev))
    stages = tuple(_stage_cost(t, m, budgets, d, a, b) for d, (a, b) in enumerate(ranges))
    return LayerPlan(ranges, stages, max(stages))


def exhaustive_layers(
    times: Sequence[Sequence[float]], layer_bytes: Sequence[float], budgets: Sequence[float | None]
) -> float:
    """The best bottleneck over every split (for tests and the planner gap)."""
    t = np.asarray(times, dtype=np.float64)
    m = np.asarray(layer_bytes, dtype=np.float64)
    _check_layers(t, m, budgets)
    n_dev, n_layers = t.shape
    best = INF
    for inner in itertools.combinations(range(1, n_layers), n_dev - 1):
        edges = (0, *inner, n_layers)
        worst = max(_stage_cost(t, m, budgets, d, edges[d], edges[d + 1]) for d in range(n_dev))
        best = min(best, worst)
    return best


Cost = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _sub_cost(q: Cost, length: int, min_len: int) -> np.ndarray:
    """Eq. 3 as a table: ``cost[x, p]`` for ``x`` new tokens after ``p`` earlier ones,
    ``+inf`` below ``min_len`` (``q`` is called once, on arrays)."""
    x, p = np.meshgrid(np.arange(length + 1), np.arange(length + 1), indexing="ij")
    table = np.asarray(q(x, p), dtype=np.float64)
    table = np.where((x < min_len) | (x + p > length) | (x == 0), INF, table)
    return table


def _balanced(cost: np.ndarray, length: int, max_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 2 for every prefix ``y <= length`` and ``k <= max_parts``: ``W[k, y]`` and the
    cut that achieves it."""
    w = np.full((max_parts + 1, length + 1), INF)
    cut = np.zeros((max_parts + 1, length + 1), dtype=np.int64)
    ys = np.arange(length + 1)
    w[1, :] = cost[ys, 0]
    for k in range(2, max_parts + 1):
        for y in range(1, length + 1):
            splits = np.arange(1, y)
            if splits.size == 0:
                continue
            options = np.maximum(w[k - 1, splits], cost[y - splits, splits])
            i = int(np.argmin(options))
            w[k, y], cut[k, y] = options[i], splits[i]
    return w, cut


def plan_sequence(
    q: Cost,
    length: int,
    *,
    min_len: int,
    n_devices: int,
    max_parts: int | None = None,
    exactly: int | None = None,
) -> SequencePlan:
    """Eq. 2-4: the cut of a ``length``-token prompt into sub-sequences (at most ``4 |D|``
    of them unless ``max_parts`` says; ``exactly`` fixes the count) with the least Eq. 4
    latency. ``q(x, p)`` takes arrays. ``ConfigError`` if not even one part of
    ``min_len`` fits."""
    if length < 1 or n_devices < 1 or min_len < 1:
        raise ConfigError(f"need a prompt, a device and min_len >= 1, got {length}, {n_devices}, {min_len}")
    parts_cap = max(1, min(exactly or max_parts or 4 * n_devices, length // min_len))
    cost = _sub_cost(q, length, min(min_len, length))
    w, cut = _balanced(cost, length, parts_cap)
    best: SequencePlan | None = None
    for k in range(parts_cap if exactly else 1, parts_cap + 1):
        if not math.isfinite(w[k, length]):
            continue
        parts = _parts(cut, k, length)
        plan = _with_latency(cost, parts, n_devices)
        if best is None or plan.latency_s < best.latency_s:
            best = plan
    assert best is not None  # k = 1 with the whole prompt always fits
    return best


def _parts(cut: np.ndarray, k: int, length: int) -> tuple[int, ...]:
    ends = [length]
    for kk in range(k, 1, -1):
        ends.append(int(cut[kk, ends[-1]]))
    edges = [0, *ends[::-1]]
    return tuple(b - a for a, b in zip(edges, edges[1:], strict=False))


def _with_latency(cost: np.ndarray, parts: Sequence[int], n_devices: int) -> SequencePlan:
    """Eq. 4 for one cut: ``sum h_i + (|D| - 1) max h_i``."""
    before = np.cumsum((0, *parts[:-1]))
    h = tuple(float(cost[x, p]) for x, p in zip(parts, before, strict=True))
    slowest = max(h)
    return SequencePlan(tuple(parts), h, slowest, sum(h) + (n_devices - 1) * slowest)


def slowest_by_parts(q: Cost, length: int, *, min_len: int, max_parts: int) -> dict[int, float]:
    """Eq. 2's ``W(1 -> length, k)`` for each feasible ``k <= max_parts``."""
    cost = _sub_cost(q, length, min(min_len, length))
    w, _ = _balanced(cost, length, max_parts)
    return {k: float(w[k, length]) for k in range(1, max_parts + 1) if math.isfinite(w[k, length])}


def exhaustive_sequence(
    q: Cost, length: int, *, min_len: int, n_devices: int, max_parts: int
) -> tuple[dict[int, float], SequencePlan]:
    """Every cut into at most ``max_parts`` parts of at least ``min_len`` tokens (for tests
    and the planner gap): the least slowest part per number of parts, and the cut with
    the least Eq. 4 latency of all."""
    cost = _sub_cost(q, length, min(min_len, length))
    slowest: dict[int, float] = {}
    best: SequencePlan | None = None
    for k in range(1, max_parts + 1):
        for inner in itertools.combinations(range(1, length), k - 1):
            edges = (0, *inner, length)
            parts = tuple(b - a for a, b in zip(edges, edges[1:], strict=False))
            if min(parts) < min(min_len, length):
                continue
            plan = _with_latency(cost, parts, n_devices)
            slowest[k] = min(slowest.get(k, INF), plan.slowest_s)
            if best is None or plan.latency_s < best.latency_s:
                best = plan
    assert best is not None
    return slowest, best
