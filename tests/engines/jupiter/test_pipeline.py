"""Stages as real processes on loopback (torch.distributed, gloo): the prompt read in
sub-sequences through a 2- or 3-stage pipeline, then greedy decoding; the text equals the
whole model's in one process."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinfer.transport.ports import free_loopback_port
from tests.conftest import HAS_TORCH
from tests.engines.jupiter.conftest import devices_context, stop

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")


def _rank(
    rank: int, world: int, port: int, path: str, bounds: list[int], prompt: list[int], parts: list[int], out
) -> None:  # type: ignore[no-untyped-def]
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.engines.jupiter.pipeline import Picker, drive
    from coinfer.engines.jupiter.relay import serve
    from coinfer.engines.jupiter.stage import Stage

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        stage = Stage(model, bounds[rank], bounds[rank + 1])
        if rank == 0:
            pick = Picker(SamplingParams()) if stage.last else None  # one device: rank 0 picks
            out.put(list(drive(stage, world, prompt, parts, max_tokens=8, eos=(), pick=pick)))
        else:
            serve(stage, rank, world, Picker(SamplingParams()) if stage.last else None)
    finally:
        dist.destroy_process_group()


def _alone(path: Path, prompt: list[int], n: int) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    ids = torch.tensor([prompt])
    out: list[int] = []
    with torch.inference_mode():
        for _ in range(n):
            nxt = int(model(ids).logits[0, -1].argmax())
            out.append(nxt)
            ids = torch.cat([ids, torch.tensor([[nxt]])], dim=1)
    return out


@pytest.mark.parametrize(("bounds", "parts"), [([0, 1, 2], [5, 4, 3]), ([0, 1, 2], [12]), ([0, 2], [7, 5])])
def test_a_pipeline_of_processes_writes_what_one_process_writes(
    tiny_dirs, bounds: list[int], parts: list[int]
) -> None:  # type: ignore[no-untyped-def]
    path = tiny_dirs["qwen2"]
    prompt = [5, 17, 33, 8, 90, 41, 7, 7, 64, 12, 3, 99]
    ctx = devices_context()
    results = ctx.Queue()
    port = free_loopback_port()
    world = len(bounds) - 1
    procs = [
        ctx.Process(target=_rank, args=(r, world, port, str(path), bounds, prompt, parts, results))
        for r in range(world)
    ]
    for p in procs:
        p.start()
    try:
        got = results.get(timeout=120)
    finally:
        stop(procs)
    assert all(p.exitcode == 0 for p in procs)
    assert got == _alone(path, prompt, 8)


def test_a_bad_cut_of_the_prompt_is_refused() -> None:
    from coinfer.engines.jupiter.pipeline import drive
    from coinfer.errors import ConfigError

    with pytest.raises(ConfigError, match="do not cut"):
        next(drive(None, 2, [1, 2, 3], [2, 2], max_tokens=1, eos=()))
    with pytest.raises(ConfigError, match="do not cut"):
        next(drive(None, 2, [1, 2, 3], [], max_tokens=1, eos=()))
