"""Shared by the Jupiter tests: a tiny model with heads trained on its own text, and a
cluster of real device processes with those heads.

Every device process of these tests is forked from one server that imported torch and
transformers once (``multiprocessing``'s forkserver, ``DEVICE_PRELOAD``), not started as a
fresh interpreter that imports them again: an import costs several seconds on a small
machine, most of a test's time. Each device is still a process of its own, meeting the
others over loopback through torch.distributed (gloo); the workers run ``coinfer edge
worker``'s own entry point (``tests/cli/test_edge.py`` starts the command itself)."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.context import BaseContext
from typing import Any

import pytest

PROMPT = [5, 17, 33, 8, 90, 41, 7, 7, 64, 12, 3, 99, 21, 40]
TOKEN = "t0ken"
DEVICE_PRELOAD = [
    "torch",
    "transformers.models.qwen2.modeling_qwen2",
    "transformers.models.llama.modeling_llama",
    "coinfer.cli",
    "coinfer.engines.jupiter",
]


def devices_context() -> BaseContext:
    """The forkserver that starts these tests' device processes, its imports preloaded
    (the server starts with the first process and serves the whole test session)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(DEVICE_PRELOAD)
    return ctx


def _edge_worker(argv: list[str], token: str) -> None:
    import os
    import sys

    from coinfer.cli import main

    os.environ["COINFER_EDGE_TOKEN"] = token
    sys.exit(main(argv))


def start_worker(rank: int, world: int, master: str, name: str, dtype: str | None = None) -> Any:
    """Device ``rank`` as ``coinfer edge worker --rank rank ...`` (its arguments are
    ``worker_command``'s), on core 0, in a process forked from ``devices_context``."""
    from coinfer.engines.jupiter.worker import worker_command

    argv = worker_command(rank, world, master, [0], name, dtype=dtype)[3:]  # after ``python -m coinfer``
    proc = devices_context().Process(target=_edge_worker, args=(argv, TOKEN))  # type: ignore[attr-defined]
    proc.start()
    return proc


def stop(procs: list[Any], timeout: float = 60) -> None:
    """Wait for each process to end (a device leaves when device 0 closes the group);
    kill one still running after ``timeout``."""
    for proc in procs:
        proc.join(timeout=timeout)
        if proc.is_alive():
            proc.kill()
            proc.join()


@pytest.fixture(scope="session")
def model_and_heads(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A tiny 4-layer model and heads trained on its own greedy answers (this prompt's
    among them), so that the heads guess well."""
    from coinfer.models.heads import DraftHeads, config_digest
    from coinfer.models.heads_training import TrainConfig, corpus_features, generate_corpus, train_heads
    from coinfer.models.load import load_model
    from coinfer.testing import tiny_hf_model_dir

    root = tmp_path_factory.mktemp("sd")
    folder = tiny_hf_model_dir(root / "m", arch="qwen2", layers=4, seed=9)
    model = load_model(str(folder), backend="transformers")
    rows = generate_corpus(model, ["a b c", "hello there", "x y"], root / "answers.jsonl", max_tokens=40)
    seq = model.new_sequence()  # the test prompt's own answer, as raw ids
    answer: list[int] = []
    logits = model.extend(seq, PROMPT)
    for _ in range(40):
        answer.append(int(logits[-1].argmax()))
        logits = model.extend(seq, answer[-1:])
    data = corpus_features(model.model, [*rows, {"prompt": PROMPT, "answer": answer}], k=3)
    heads = DraftHeads.zeros(model="tiny", digest=config_digest(folder), hidden=data.hidden.shape[1], heads=3)
    train_heads(heads, model.model.lm_head, data, config=TrainConfig(epochs=30, batch=64, lr=1e-2))
    heads.save(root / "heads")
    return str(folder), str(root / "heads")


@contextmanager
def cluster_with_heads(
    path: str, heads_dir: str, world: int, master: str, kv: str = "dynamic"
) -> Iterator[Any]:
    """This process as device 0 of ``world``, meeting the others (``run_on_devices``'s
    workers) at ``master``, every stage on ``kv`` caches, the heads given to the cluster;
    closed after."""
    from coinfer.engines.jupiter import EdgeCluster
    from coinfer.models.heads import DraftHeads

    cluster = EdgeCluster(path, world=world, master=master, threads=1, token=TOKEN, kv=kv)
    cluster.use_heads(DraftHeads.load(heads_dir))
    yield cluster
    cluster.close()


def run_spawned(target: Callable[..., None], *args: Any) -> Any:
    """``target(*args, queue)`` in a process of its own (gloo's group is per process);
    what it puts on the queue, once the process ended cleanly."""
    ctx = devices_context()
    results = ctx.Queue()  # type: ignore[attr-defined]
    proc = ctx.Process(target=target, args=(*args, results))  # type: ignore[attr-defined]
    proc.start()
    try:
        got = results.get(timeout=240)
    finally:
        stop([proc])
    assert proc.exitcode == 0, f"device 0 ended with {proc.exitcode}"
    return got


def run_on_devices(
    target: Callable[..., None], world: int, *args: Any, worker_dtype: str | None = None
) -> Any:
    """``target(master, world, *args, queue)`` as device 0 of ``world`` whose other devices are
    ``coinfer edge worker`` processes meeting it at ``master`` (``--dtype worker_dtype``
    where given); what it puts on the queue, once every device ended cleanly."""
    from coinfer.transport.ports import free_loopback_port

    master = f"127.0.0.1:{free_loopback_port()}"
    workers = [start_worker(r, world, master, f"d{r}", worker_dtype) for r in range(1, world)]
    try:
        got = run_spawned(target, master, world, *args)
    finally:
        stop(workers)
    assert [w.exitcode for w in workers] == [0] * len(workers)  # each left when device 0 closed
    return got
