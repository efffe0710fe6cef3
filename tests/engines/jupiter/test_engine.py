"""The engine convention over real devices: a caller that stops reading a stream early
leaves the cluster ready for the next request."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from tests.conftest import HAS_TORCH

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")

PROMPT = [5, 17, 33, 8, 90, 41, 7, 7, 64, 12, 3, 99, 21, 40]


def _two_requests(path: str, out) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess

    from coinfer.engines.jupiter import EdgeCluster, JupiterConfig, generate, stream
    from coinfer.engines.jupiter.worker import worker_command
    from coinfer.transport.ports import free_loopback_port

    master = f"127.0.0.1:{free_loopback_port()}"
    env = {**os.environ, "COINFER_EDGE_TOKEN": "t0ken"}
    worker = subprocess.Popen(worker_command(1, 2, master, [0], "device1"), env=env)
    try:
        cluster = EdgeCluster(path, world=2, master=master, threads=1, token="t0ken")
        config = JupiterConfig(max_tokens=8, min_part=4, parts=3)
        first = stream(cluster, PROMPT, config=config)
        early = [next(first).tokens[0] for _ in range(2)]
        first.close()  # the caller stops after two tokens
        whole = generate(cluster, PROMPT, config=config)
        out.put((early, whole.tokens, whole.extras["parts"]))
        cluster.close()
    finally:
        worker.wait(timeout=60)


def test_a_stream_closed_early_leaves_the_devices_ready_for_the_next_request(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_two_requests, args=(str(tiny_dirs["qwen2"]), results))
    proc.start()
    try:
        early, whole, parts = results.get(timeout=180)
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0
    assert len(parts) == 3 and len(whole) == 8
    assert whole[:2] == early
