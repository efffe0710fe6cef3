"""The engine convention over real devices: a caller that stops reading a stream early
leaves the cluster ready for the next request."""

from __future__ import annotations

import pytest

from tests.conftest import HAS_TORCH
from tests.engines.jupiter.conftest import TOKEN, run_on_devices

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")

PROMPT = [5, 17, 33, 8, 90, 41, 7, 7, 64, 12, 3, 99, 21, 40]


def _two_requests(master: str, world: int, path: str, out) -> None:  # type: ignore[no-untyped-def]
    from coinfer.engines.jupiter import EdgeCluster, JupiterConfig, generate, stream

    cluster = EdgeCluster(path, world=world, master=master, threads=1, token=TOKEN)
    config = JupiterConfig(max_tokens=8, min_part=4, parts=3)
    first = stream(cluster, PROMPT, config=config)
    early = [next(first).tokens[0] for _ in range(2)]
    first.close()  # the caller stops after two tokens
    whole = generate(cluster, PROMPT, config=config)
    out.put((early, whole.tokens, whole.extras["parts"]))
    cluster.close()


def test_a_stream_closed_early_leaves_the_devices_ready_for_the_next_request(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    early, whole, parts = run_on_devices(_two_requests, 2, str(tiny_dirs["qwen2"]))
    assert len(parts) == 3 and len(whole) == 8
    assert whole[:2] == early
