"""A Jupiter pipeline started from Python (``start_local_pipeline``: this process and a
worker process), opened from the registry: it meets the engine contract and gives plain
decoding's greedy text, and closing it ends its workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import HAS_TORCH
from tests.engines.jupiter.conftest import PROMPT, run_spawned

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")


def _from_python(path: str, out) -> None:  # type: ignore[no-untyped-def]
    from coinfer.engines import Request, get
    from coinfer.engines.jupiter import start_local_pipeline
    from coinfer.models import load_model

    engine = get("jupiter")
    with start_local_pipeline(path, devices=2, n_ctx=256) as pipeline:
        with engine.open({"cluster": pipeline.cluster}, engine.config(max_tokens=12)) as session:
            steps = list(session.stream(Request(prompt=PROMPT)))
            whole = session.generate(Request(prompt=PROMPT))
            early = session.stream(Request(prompt=PROMPT))
            next(early)
            early.close()  # the caller stops after one token
            again = session.generate(Request(prompt=PROMPT))
            text = session.model.detokenize(whole.tokens)
        workers = pipeline.workers
    ended = [w.poll() is not None for w in workers]
    model = load_model(path, backend="transformers", n_ctx=256)
    with get("plain").open({"target": model}, get("plain").config(max_tokens=12)) as plain:
        alone = plain.generate(Request(prompt=PROMPT)).tokens
    out.put(
        (
            [t for r in steps for t in r.tokens],
            whole,
            again.tokens,
            text,
            ended,
            alone,
            steps[-1].stats.n_tokens,
        )
    )


def test_a_pipeline_started_from_python_meets_the_engine_contract(tiny_dirs: dict[str, Path]) -> None:
    streamed, whole, again, text, ended, alone, n_tokens = run_spawned(_from_python, str(tiny_dirs["qwen2"]))
    assert whole.tokens == streamed == again and whole.text == text
    assert n_tokens == whole.stats.n_tokens == len(whole.tokens)
    assert whole.tokens == alone  # lossless: plain decoding's greedy text
    assert ended == [True]  # closing the pipeline ended its worker


def _joined(path: str, out) -> None:  # type: ignore[no-untyped-def]
    import os
    import subprocess

    from coinfer.engines.jupiter import JupiterConfig, generate, join_pipeline
    from coinfer.engines.jupiter.worker import worker_command
    from coinfer.transport.ports import free_loopback_port

    listen = f"127.0.0.1:{free_loopback_port()}"
    env = {**os.environ, "COINFER_EDGE_TOKEN": "t0ken"}
    worker = subprocess.Popen(
        worker_command(1, 2, listen, [0], "elsewhere"), env=env
    )  # another host's device
    try:
        with join_pipeline(path, listen=listen, devices=2, token="t0ken", n_ctx=256) as pipeline:
            tokens = generate(pipeline.cluster, PROMPT, config=JupiterConfig(max_tokens=12)).tokens
            world = pipeline.cluster.world
    finally:
        worker.wait(timeout=60)
    out.put((tokens, worker.returncode, world))


def test_a_pipeline_joins_devices_started_elsewhere(tiny_dirs: dict[str, Path]) -> None:
    tokens, code, world = run_spawned(_joined, str(tiny_dirs["qwen2"]))
    assert len(tokens) == 12 and world == 2 and code == 0  # the worker left cleanly when device 0 closed


def test_a_device_that_dies_mid_request_is_named_and_every_worker_stopped() -> None:
    import subprocess
    import sys
    import threading

    from coinfer.engines.jupiter.local import LocalPipeline
    from coinfer.errors import DeviceLostError

    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    pipeline = LocalPipeline("127.0.0.1:1", "t", 3, workers=sleepers)
    stuck = threading.Event()

    def request():  # type: ignore[no-untyped-def]
        yield "first"
        stuck.wait()  # a collective call that never returns: its peer is gone
        yield "never"

    got = []
    with pytest.raises(DeviceLostError, match=rf"device 2 \(pid {sleepers[1].pid}\) was killed by signal 9"):
        for item in pipeline.watched(request, poll_s=0.05):
            got.append(item)
            sleepers[1].kill()
    stuck.set()
    assert got == ["first"]
    assert all(p.poll() is not None for p in sleepers)  # the other worker was stopped too


def test_a_guarded_pipeline_stops_every_worker_when_one_dies_and_goes_on_naming_that_one() -> None:
    """A server's pipeline (``guard``): its requests run on threads of their own, so the
    guard watches in the background; the first device to die is named, not the workers
    it stopped after it."""
    import subprocess
    import sys
    import time

    from coinfer.engines.jupiter.local import LocalPipeline

    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    pipeline = LocalPipeline("127.0.0.1:1", "t", 3, workers=sleepers)
    pipeline.guard(poll_s=0.05)
    assert pipeline.lost_device() is None
    sleepers[1].terminate()
    for _ in range(400):  # the guard's next look (a test's own bound, not a timing assertion)
        if sleepers[0].poll() is not None:
            break
        time.sleep(0.05)
    assert sleepers[0].poll() is not None  # the other worker was stopped by the guard
    assert pipeline.lost_device() == f"device 2 (pid {sleepers[1].pid}) was killed by signal 15"
    pipeline.stop()


def test_an_error_in_the_request_reaches_the_caller_and_a_pipeline_without_a_model_says_so() -> None:
    from coinfer.engines.jupiter.local import LocalPipeline
    from coinfer.errors import ConfigError

    pipeline = LocalPipeline("127.0.0.1:1", "t", 1)

    def request():  # type: ignore[no-untyped-def]
        yield 1
        raise ValueError("bad prompt")

    with pytest.raises(ValueError, match="bad prompt"):
        list(pipeline.watched(request))
    assert list(pipeline.watched(lambda: iter([1, 2]))) == [1, 2]
    with pytest.raises(ConfigError, match="no model loaded"):
        pipeline.cluster  # noqa: B018
    assert pipeline.memory() is None  # no budgets given
