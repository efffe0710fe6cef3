"""Jupiter's planner against exhaustive search on small instances: the layer split of Eq. 1
under memory budgets with unequal devices, and the sequence cut of Eq. 2-4."""

from __future__ import annotations

import numpy as np
import pytest

from coinfer.engines.jupiter.planner import (
    exhaustive_layers,
    exhaustive_sequence,
    plan_layers,
    plan_sequence,
    slowest_by_parts,
)
from coinfer.errors import ConfigError


def _instance(seed: int, n_dev: int, n_layers: int) -> tuple[np.ndarray, np.ndarray, list[float | None]]:
    rng = np.random.default_rng(seed)
    speed = rng.uniform(0.5, 2.0, size=n_dev)  # a 1-core device next to a 2-core one, and so on
    per_layer = rng.uniform(1.0, 3.0, size=n_layers)
    times = np.outer(1.0 / speed, per_layer)
    layer_bytes = rng.uniform(1.0, 2.0, size=n_layers)
    total = float(layer_bytes.sum())
    budgets: list[float | None] = [
        None if rng.random() < 0.3 else float(rng.uniform(0.35, 0.9)) * total for _ in range(n_dev)
    ]
    return times, layer_bytes, budgets


@pytest.mark.parametrize("seed", range(40))
def test_the_layer_split_is_the_exhaustive_optimum(seed: int) -> None:
    n_dev = 2 + seed % 3
    times, layer_bytes, budgets = _instance(seed, n_dev, n_layers=6 + seed % 5)
    best = exhaustive_layers(times, layer_bytes, budgets)
    if not np.isfinite(best):
        with pytest.raises(ConfigError, match="does not fit"):
            plan_layers(times, layer_bytes, budgets)
        return
    plan = plan_layers(times, layer_bytes, budgets)
    assert plan.bottleneck_s == pytest.approx(best)
    edges = [a for a, _ in plan.ranges] + [plan.ranges[-1][1]]
    assert edges[0] == 0 and edges[-1] == times.shape[1] and all(b > a for a, b in plan.ranges)
    for d, (a, b) in enumerate(plan.ranges):  # every stage within its device's budget
        assert budgets[d] is None or layer_bytes[a:b].sum() <= budgets[d] + 1e-9


def test_the_faster_device_gets_more_layers() -> None:
    times = np.array([[1.0] * 12, [0.5] * 12])  # device 1 twice as fast
    plan = plan_layers(times, [1.0] * 12, [None, None])
    assert plan.ranges == ((0, 4), (4, 12)) and plan.bottleneck_s == pytest.approx(4.0)


def test_a_budget_moves_layers_off_a_small_device() -> None:
    times = np.array([[1.0] * 8, [1.0] * 8])
    plan = plan_layers(times, [1.0] * 8, [3.0, None])  # device 0 holds at most 3 layers
    assert plan.ranges == ((0, 3), (3, 8))


def test_a_model_too_big_for_the_budgets_is_refused() -> None:
    with pytest.raises(ConfigError, match="does not fit"):
        plan_layers(np.ones((2, 6)), [1.0] * 6, [2.0, 2.0])
    with pytest.raises(ConfigError, match="cannot each hold a layer"):
        plan_layers(np.ones((3, 2)), [1.0] * 2, [None] * 3)


def _q(a: float, c: float) -> object:
    """A sub-sequence's time: a fixed cost, its own tokens, and attention to earlier ones."""
    return lambda x, p: a + x * (1.0 + c * (p + x / 2))


@pytest.mark.parametrize(
    ("length", "min_len", "n_devices", "a", "c"),
    [
        (12, 2, 2, 0.5, 0.05),
        (14, 3, 2, 2.0, 0.1),
        (11, 1, 3, 0.2, 0.02),
        (16, 4, 2, 1.0, 0.3),
        (9, 2, 4, 0.0, 0.0),
    ],
)
def test_the_sequence_cut_is_balanced_as_exhaustively(
    length: int, min_len: int, n_devices: int, a: float, c: float
) -> None:
    q = _q(a, c)
    cap = min(4 * n_devices, length // min_len)
    slowest, best_any = exhaustive_sequence(q, length, min_len=min_len, n_devices=n_devices, max_parts=cap)
    w = slowest_by_parts(q, length, min_len=min_len, max_parts=cap)
    assert set(w) == set(slowest) and all(w[k] == pytest.approx(slowest[k]) for k in w)  # Eq. 2 exact
    plan = plan_sequence(q, length, min_len=min_len, n_devices=n_devices)
    assert sum(plan.parts) == length and min(plan.parts) >= min_len
    assert plan.slowest_s == pytest.approx(w[len(plan.parts)])
    # Eq. 4 over balanced cuts is near the best of all cuts
    assert plan.latency_s <= best_any.latency_s * 1.15


def test_later_sub_sequences_are_shorter_when_attention_dominates() -> None:
    plan = plan_sequence(_q(0.0, 0.5), 64, min_len=4, n_devices=2, max_parts=4)
    assert len(plan.parts) > 1 and list(plan.parts) == sorted(plan.parts, reverse=True)


def test_a_prompt_shorter_than_the_minimum_is_one_part() -> None:
    plan = plan_sequence(_q(1.0, 0.1), 5, min_len=8, n_devices=2)
    assert plan.parts == (5,)
