"""``coinfer edge launch`` as a user runs it: real worker processes on loopback joined by
torch.distributed (gloo), a tiny random model; the text equals ``coinfer generate``'s."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.run import assert_user_error, coinfer
from tests.conftest import needs_torch

PROMPT = "the quick brown fox jumps over the lazy dog and then " * 3


@pytest.fixture(scope="module")
def four_layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coinfer.testing import tiny_hf_model_dir

    return tiny_hf_model_dir(tmp_path_factory.mktemp("edge") / "m", arch="qwen2", layers=4, seed=3)


@functools.cache  # one process per model and flags: several tests compare with the same text
def _generate(model: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    proc = coinfer("generate", PROMPT, "-m", str(model), "-b", "transformers", "--draft", "none", "--raw",
                   "-n", "16", "--json", *extra)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _launch(model: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    proc = coinfer("edge", "launch", PROMPT, "-m", str(model), "--raw", "-n", "16", "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@needs_torch
@pytest.mark.parametrize("devices", ["2", "3"])
def test_a_pipeline_of_devices_writes_what_generate_writes(
    four_layers: Path, devices: str, tmp_path: Path
) -> None:
    alone = _generate(four_layers)
    trace_file = tmp_path / "run.json"
    out = _launch(
        four_layers, "--devices", devices, "--min-part", "8", "--parts", "4", "--trace", str(trace_file)
    )
    assert out["text"] == alone["text"] and out["n_tokens"] == alone["n_tokens"]
    trace = json.loads(trace_file.read_text())  # plain decoding: every token the target's own
    assert trace["engine"] == "jupiter" and trace["stats"] == out["stats"]
    assert [o for step in trace["steps"] for o, _, _ in step["spans"]] == ["target"] * out["n_tokens"]
    assert out["engine"] == "jupiter" and out["stats"]["prompt_tokens"] == alone["stats"]["prompt_tokens"]
    parts = out["extras"]["parts"]
    assert len(parts) == 4 and sum(parts) == out["stats"]["prompt_tokens"]  # pipelined prefill
    layers = [d["layers"] for d in out["extras"]["devices"]]
    assert layers[0][0] == 0 and layers[-1][1] == 4 and len(layers) == int(devices)
    assert all(a[1] == b[0] for a, b in zip(layers, layers[1:], strict=False))
    assert out["extras"]["devices"][0]["bytes_sent"] > 0


@needs_torch
def test_sampling_with_a_seed_and_a_plain_pipeline_write_what_generate_writes(four_layers: Path) -> None:
    sampled = ("--temperature", "0.9", "--seed", "7")
    assert (
        _launch(four_layers, "--devices", "2", *sampled)["text"] == _generate(four_layers, *sampled)["text"]
    )
    plain = _launch(four_layers, "--devices", "2", "--plain-prefill", "--split", "memory")
    assert plain["text"] == _generate(four_layers)["text"] and plain["extras"]["parts"] == [
        plain["stats"]["prompt_tokens"]
    ]


@needs_torch
def test_a_budget_nothing_fits_is_refused_in_one_line(four_layers: Path) -> None:
    proc = coinfer("edge", "launch", "hi", "-m", str(four_layers), "--devices", "1", "--memory", "50M")
    assert_user_error(proc, "does not fit")
    proc = coinfer("edge", "launch", "hi", "-m", str(four_layers), "--devices", "2", "--memory", "1,2,3")
    assert_user_error(proc, "--memory")


@needs_torch
def test_devices_on_static_caches_write_what_generate_writes(four_layers: Path) -> None:
    """``--kv static``: the GPU path's stages (``StaticStage``), here on the CPU."""
    assert _launch(four_layers, "--devices", "2", "--kv", "static")["text"] == _generate(four_layers)["text"]
    proc = coinfer("edge", "launch", "hi", "-m", str(four_layers), "--device", "cuda", "--kv", "dynamic")
    assert_user_error(proc, "runs on the CPU")


@needs_torch
def test_dtype_sets_every_devices_stage_and_writes_what_generate_writes_in_it(four_layers: Path) -> None:
    """``--dtype bfloat16`` (a GPU's default) reaches both devices: their text is a
    bfloat16 model's, not float32's. The dynamic-cache stage refuses it before starting."""
    bf16 = _launch(four_layers, "--devices", "2", "--kv", "static", "--dtype", "bfloat16")["text"]
    assert bf16 == _generate(four_layers, "--kv", "static", "--dtype", "bfloat16")["text"]
    assert bf16 != _generate(four_layers)["text"]  # the float32 text (random weights: near-ties flip)
    proc = coinfer("edge", "launch", "hi", "-m", str(four_layers), "--kv", "dynamic", "--dtype", "float16")
    assert_user_error(proc, "runs in float32")


def _edge_cgroups() -> set[str]:
    root = Path("/sys/fs/cgroup/memory")
    return {p.name for p in root.glob("coinfer-edge-*")} if root.is_dir() else set()


@needs_torch
@pytest.mark.skipif(
    os.geteuid() != 0 or not Path("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists(),
    reason="needs root and the v1 memory controller",
)
def test_memory_budgets_are_held_by_the_os_and_the_text_is_unchanged(four_layers: Path) -> None:
    before = _edge_cgroups()
    out = _launch(four_layers, "--devices", "2", "--memory", "3G,2G")
    assert out["text"] == _generate(four_layers)["text"]
    memory = out["memory"]
    assert memory["enforced"] is True and memory["budget_mb"] == [3072, 2048]
    peaks = zip(memory["peak_mb"], memory["budget_mb"], strict=True)
    assert all(0 <= peak <= budget for peak, budget in peaks)  # what each loaded, held to its budget
    assert _edge_cgroups() == before  # every device's cgroup is gone after the run


def _workers_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
                stat = (entry / "stat").read_text().split()
            except OSError:
                continue
            if b"worker" in cmd and b"edge" in cmd and int(stat[3]) == pid:
                found.append(int(entry.name))
    return found


@needs_torch
def test_a_killed_device_stops_the_run_with_a_line_naming_it_and_leaves_no_process(four_layers: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "coinfer", "edge", "launch", PROMPT, "-m", str(four_layers), "--raw",
         "--devices", "3", "-n", "400"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.time() + 120
    workers: list[int] = []
    while time.time() < deadline and len(workers) < 2:
        workers = _workers_of(proc.pid)
        time.sleep(0.2)
    assert len(workers) == 2
    proc.stdout.read(1) if proc.stdout else None  # the first token is out: the run is serving
    os.kill(workers[0], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in stderr
    assert "coinfer: error: device" in stderr and "was killed by signal 9" in stderr, stderr
    assert not _workers_of(proc.pid)
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]


def _remote_worker(port: int, token: str, *extra: str) -> subprocess.Popen[str]:
    """``coinfer edge worker`` started by hand, as on another host."""
    return subprocess.Popen(
        [sys.executable, "-m", "coinfer", "edge", "worker", "--rank", "1", "--world", "2",
         "--master", f"127.0.0.1:{port}", "--name", "remote", *extra],
        env={**os.environ, "COINFER_EDGE_TOKEN": token},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


@needs_torch
def test_a_device_started_elsewhere_joins_a_listening_launch(four_layers: Path) -> None:
    from coinfer.transport.ports import free_loopback_port

    port, token = free_loopback_port(), "s3cret-edge"
    before = _edge_cgroups()
    worker = _remote_worker(port, token, "--memory", "3G")
    listen = ("--devices", "2", "--listen", f"127.0.0.1:{port}")
    proc = coinfer("edge", "launch", PROMPT, "-m", str(four_layers), "--raw", "-n", "16", "--json", *listen,
                   env={"COINFER_EDGE_TOKEN": token})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    worker.communicate(timeout=60)
    assert worker.returncode == 0
    out = json.loads(proc.stdout)
    assert out["text"] == _generate(four_layers)["text"]
    assert [d["name"] for d in out["extras"]["devices"]] == ["device0", "remote"]
    assert _edge_cgroups() == before  # the worker removed its own cgroup (where it could make one)


@needs_torch
def test_a_remote_device_budget_is_planned_for_and_a_listen_without_a_token_is_refused(
    four_layers: Path,
) -> None:
    from coinfer.transport.ports import free_loopback_port

    port, token = free_loopback_port(), "s3cret-edge"
    worker = _remote_worker(port, token, "--memory", "1M")  # less than any one layer
    proc = coinfer("edge", "launch", PROMPT, "-m", str(four_layers), "--raw", "--devices", "2", "--memory",
                   "3G,3G", "--listen", f"127.0.0.1:{port}", env={"COINFER_EDGE_TOKEN": token})  # fmt: skip
    assert_user_error(proc, "does not fit")
    worker.communicate(timeout=60)
    assert worker.returncode != 0
    env = {k: v for k, v in os.environ.items() if k != "COINFER_EDGE_TOKEN"}
    bare = subprocess.run(
        [sys.executable, "-m", "coinfer", "edge", "launch", "hi", "-m", str(four_layers), "--devices", "2",
         "--listen", "127.0.0.1:29999"], capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert_user_error(bare, "COINFER_EDGE_TOKEN")


@needs_torch
def test_a_device_s_own_dtype_on_a_dynamic_cache_pipeline_is_refused_with_the_fix(four_layers: Path) -> None:
    """A worker started with its own ``--dtype`` needs static caches; rank 0 says which
    device refused and how to fix it (its hint crosses the wire)."""
    from coinfer.transport.ports import free_loopback_port

    port, token = free_loopback_port(), "s3cret-edge"
    worker = _remote_worker(port, token, "--dtype", "bfloat16")
    proc = coinfer("edge", "launch", PROMPT, "-m", str(four_layers), "--raw", "--devices", "2",
                   "--listen", f"127.0.0.1:{port}", env={"COINFER_EDGE_TOKEN": token})  # fmt: skip
    assert_user_error(proc, "device 1", "float32, not bfloat16", "--kv static")
    worker.communicate(timeout=60)
    assert worker.returncode != 0


@needs_torch
def test_speculative_decoding_with_heads_writes_what_generate_writes(
    four_layers: Path, tmp_path: Path
) -> None:
    import torch

    from coinfer.models.heads import DraftHeads, HeadsMeta, config_digest

    torch.manual_seed(0)
    meta = HeadsMeta("tiny", config_digest(four_layers), 64, 3)
    DraftHeads(torch.randn(3, 64, 64) * 0.05, torch.zeros(3, 64), meta).save(tmp_path / "heads")
    for devices in ("1", "2"):
        out = _launch(four_layers, "--devices", devices, "--decode", "sd", "--heads", str(tmp_path / "heads"))
        assert out["text"] == _generate(four_layers)["text"]
        assert out["extras"]["decode"] == "sd"
    proc = coinfer("edge", "launch", "hi", "-m", str(four_layers), "--decode", "sd")
    assert_user_error(proc, "--heads")
