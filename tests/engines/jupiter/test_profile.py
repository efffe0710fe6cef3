"""The profile's interpolation, a model's memory from its skeleton, exo's split, and the
rendezvous address and token checks."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import HAS_TORCH


def test_layer_time_is_read_between_and_beyond_the_profiled_points() -> None:
    from coinfer.engines.jupiter.profile import DeviceProfile

    # 1 ms per token plus 2 ms, and 1 ms more per 512 cached tokens
    rows = tuple(tuple(0.002 + 0.001 * n + 0.001 * p / 512 for n in (1, 16, 64)) for p in (0, 512))
    prof = DeviceProfile("d", 1, (1, 16, 64), (0, 512), rows, 0.01, 0)
    x, p = np.array([1, 8, 40, 128]), np.array([0, 256, 512, 1024])
    assert np.allclose(prof.q(x, p), 0.002 + 0.001 * x + 0.001 * p / 512)
    assert DeviceProfile.from_json(prof.to_json()) == prof


def test_a_device_that_is_fast_in_bursts_but_throttled_is_timed_by_its_sustained_rate() -> None:
    import time

    from coinfer.engines.jupiter.profile import seconds_per_run

    calls = []

    def run() -> None:  # 1 ms, but every fourth call waits 40 ms (a CPU quota's throttle)
        calls.append(1)
        time.sleep(0.04 if len(calls) % 4 == 0 else 0.001)

    assert 0.008 < seconds_per_run(run, window_s=0.3) < 0.016  # not the 1 ms of a burst


def test_two_models_in_folders_of_one_name_have_two_profiles(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from coinfer.engines.jupiter.profile import profile_path

    a, b = tmp_path / "a" / "model", tmp_path / "b" / "model"
    for folder, layers in ((a, 2), (b, 4)):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(f'{{"num_hidden_layers": {layers}}}')
    assert profile_path(a, "device0", 1) != profile_path(b, "device0", 1)


@pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")
def test_a_models_memory_is_counted_from_its_skeleton(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    from transformers import AutoConfig, AutoModelForCausalLM

    from coinfer.engines.jupiter.profile import ModelShape

    shape = ModelShape.of(AutoConfig.from_pretrained(tiny_dirs["llama"]))
    model = AutoModelForCausalLM.from_pretrained(tiny_dirs["llama"])
    total = 4 * sum(p.numel() for p in model.parameters())
    assert shape.n_layers * shape.layer_bytes + shape.embed_bytes + shape.head_bytes == total
    half = ModelShape.of(AutoConfig.from_pretrained(tiny_dirs["llama"]), value_bytes=2)  # bfloat16
    assert half.n_layers * half.layer_bytes + half.embed_bytes + half.head_bytes == total // 2
    assert half.kv_bytes_per_token * 2 == shape.kv_bytes_per_token


@pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")
def test_bfloat16_stages_are_planned_at_their_own_size(tiny_dirs, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The memory plan counts what the stages hold: a static stage in bfloat16 holds half
    of float32's bytes, and its budget fits twice the layers."""
    from coinfer.engines.jupiter import EdgeCluster

    monkeypatch.setenv("COINFER_CACHE", str(tmp_path))
    sizes = {}
    for kv, dtype in (("dynamic", None), ("static", "bfloat16")):
        cluster = EdgeCluster(
            str(tiny_dirs["qwen2"]), world=1, master="127.0.0.1:1", threads=1, kv=kv, dtype=dtype
        )
        sizes[dtype] = (cluster.shape.layer_bytes, cluster.shape.kv_bytes_per_token)
        cluster.close()
    assert sizes["bfloat16"] == (sizes[None][0] // 2, sizes[None][1] // 2)


def test_exos_split_follows_memory_and_gives_every_device_a_layer() -> None:
    from coinfer.engines.jupiter import memory_split

    assert memory_split(24, [1.0, 1.0]) == ((0, 12), (12, 24))
    assert memory_split(24, [3.0, 1.0]) == ((0, 18), (18, 24))
    assert memory_split(3, [100.0, 1.0, 1.0]) == ((0, 1), (1, 2), (2, 3))


def test_a_bad_master_or_a_wrong_token_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from coinfer.engines.jupiter.wire import TOKEN_ENV, check_token, parse_master
    from coinfer.errors import ConfigError, TransportError

    assert parse_master("10.0.0.2:29500") == ("10.0.0.2", 29500)
    for bad in ("10.0.0.2", ":80", "h:99999", "h:x"):
        with pytest.raises(ConfigError):
            parse_master(bad)
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    check_token({"token": "s3cret"})
    with pytest.raises(TransportError, match="token"):
        check_token({"token": "guess"})
    monkeypatch.delenv(TOKEN_ENV)
    with pytest.raises(TransportError, match="token"):
        check_token({"token": ""})


@pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")
def test_a_static_cache_device_is_profiled_as_its_stage_runs(tiny_dirs, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A device whose stage runs on static caches (a GPU's) is timed running one on its
    own device and dtype, not as transformers' layer on the CPU, and the profile says so;
    it is kept apart from the dynamic one's (two-device clusters: test_speculation)."""
    from coinfer.engines.jupiter.profile import CACHED, LENGTHS, DeviceProfile, profile_device, profile_path

    monkeypatch.setenv("COINFER_CACHE", str(tmp_path))
    folder = tiny_dirs["qwen2"]
    prof = profile_device(folder, name="device1", threads=1, base_bytes=0, kv="static")
    assert prof.stage == "static cpu float32"
    assert len(prof.layer_s) == len(CACHED) and all(len(r) == len(LENGTHS) for r in prof.layer_s)
    assert all(v > 0 for r in prof.layer_s for v in r) and prof.head_s > 0
    assert all(r[-1] > r[0] for r in prof.layer_s)  # 512 tokens cost more than one
    static = profile_path(folder, "device1", 1, kv="static")
    assert static.is_file() and not profile_path(folder, "device1", 1).exists()
    assert static != profile_path(folder, "device1", 1, kv="static", dtype="bfloat16")
    assert DeviceProfile.from_json(prof.to_json()) == prof


@pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")
def test_each_device_s_budget_is_counted_in_its_own_stage_s_bytes() -> None:
    """A device whose stage holds values in another dtype than rank 0's fits
    proportionally more or fewer of the plan's layers in its budget (a bfloat16 GPU worker
    beside a float32 rank 0, or the reverse); a GPU's stage is held to its memory there,
    whatever the host's budget, with room left for its graphs."""
    from coinfer.engines.jupiter.cluster import GPU_SHARE, layer_budget
    from coinfer.engines.jupiter.profile import DeviceProfile
    from coinfer.errors import ConfigError

    def profile(stage: str) -> DeviceProfile:
        return DeviceProfile("d", 1, (1, 16), (0,), ((1e-3, 2e-3),), 1e-3, 100, stage)

    stages = ("dynamic", "static cpu float32", "static cuda:1 bfloat16")
    assert [profile(s).value_bytes for s in stages] == [4, 4, 2]
    assert profile("static cuda float16").value_bytes == 2
    with pytest.raises(ConfigError, match="same coinfer version"):
        _ = profile("static cuda int4").value_bytes  # a newer device's stage
    gb = 1 << 30
    # rank 0 in float32: a bfloat16 device's 1 GB (less its process) holds 2 GB of float32 values
    assert layer_budget(gb + 100, profile("static cpu bfloat16"), None, 4) == 2 * gb
    assert layer_budget(gb + 100, profile("static cpu float32"), None, 2) == gb / 2  # and the reverse
    assert layer_budget(None, profile("static cpu float32"), None, 4) is None  # unlimited
    # on a GPU the layers live in its memory: the host's budget does not bound them
    assert layer_budget(gb, profile("static cuda bfloat16"), 8 * gb, 2) == GPU_SHARE * 8 * gb
    assert layer_budget(None, profile("static cuda bfloat16"), 8 * gb, 4) == GPU_SHARE * 16 * gb
    assert 0.5 < GPU_SHARE < 1


def test_stages_on_one_gpu_split_its_memory() -> None:
    """Devices of one machine whose stages run on the same GPU (``edge launch --devices 2
    --device cuda`` on a one-GPU host) each plan with their share of it, not all of it."""
    from coinfer.engines.jupiter.cluster import share_gpus

    gb = 1 << 30
    assert share_gpus([(80 * gb, "GPU-a"), (79 * gb, "GPU-a"), None, (24 * gb, "GPU-b")]) == [
        40 * gb, int(79 * gb) // 2, None, 24 * gb,
    ]  # fmt: skip
    assert share_gpus([None, None]) == [None, None]
