"""Shared by the Jupiter tests: a tiny model with heads trained on its own text, and a
cluster of real device processes with those heads, run from a spawned process."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

PROMPT = [5, 17, 33, 8, 90, 41, 7, 7, 64, 12, 3, 99, 21, 40]


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
    path: str, heads_dir: str, world: int, kv: str = "dynamic", worker_dtype: str | None = None
) -> Iterator[Any]:
    """This process as device 0 of ``world`` (the others as ``coinfer edge worker``
    processes, started with ``--dtype worker_dtype`` where given), every stage on ``kv``
    caches, the heads given to the cluster; closed and waited for after."""
    import os
    import subprocess

    from coinfer.engines.jupiter import EdgeCluster
    from coinfer.engines.jupiter.worker import worker_command
    from coinfer.models.heads import DraftHeads
    from coinfer.transport.ports import free_loopback_port

    master = f"127.0.0.1:{free_loopback_port()}"
    env = {**os.environ, "COINFER_EDGE_TOKEN": "t0ken"}
    workers = [
        subprocess.Popen(worker_command(r, world, master, [0], f"d{r}", dtype=worker_dtype), env=env)
        for r in range(1, world)
    ]
    try:
        cluster = EdgeCluster(path, world=world, master=master, threads=1, token="t0ken", kv=kv)
        cluster.use_heads(DraftHeads.load(heads_dir))
        yield cluster
        cluster.close()
    finally:
        for w in workers:
            w.wait(timeout=60)


def run_spawned(target: Callable[..., None], *args: Any) -> Any:
    """``target(*args, queue)`` in a fresh process (gloo's group is per process); what it
    puts on the queue."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, results))
    proc.start()
    try:
        return results.get(timeout=240)
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
