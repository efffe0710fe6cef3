"""Speculative decoding through the pipeline with self-drafting heads (paper 004 §V-A), on
real devices: the text is plain decoding's, greedy and sampled, on one, two and three
devices, and heads trained on the model's own text get their guesses accepted."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import HAS_TORCH
from tests.engines.jupiter.conftest import PROMPT, cluster_with_heads, run_on_devices

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")


def _requests(
    master: str, world: int, path: str, heads_dir: str, runs: list[dict[str, Any]], kv: str, out: Any
) -> None:
    from coinfer.decoding.sampling import SamplingParams
    from coinfer.engines.jupiter import JupiterConfig, generate

    with cluster_with_heads(path, heads_dir, world, master, kv) as cluster:
        results = []
        for run in runs:
            sampling = SamplingParams(**run.pop("sampling", {}))
            r = generate(
                cluster,
                PROMPT,
                config=JupiterConfig(max_tokens=32, parts=2, min_part=4, sampling=sampling, **run),
            )
            results.append((r.tokens, r.stats.accepted, r.stats.rounds))
        out.put((results, [d.profile.stage for d in cluster.devices]))


def _run(
    model_and_heads: tuple[str, str],
    world: int,
    runs: list[dict[str, Any]],
    kv: str = "dynamic",
    profiled: list[str] | None = None,
    worker_dtype: str | None = None,
) -> list[Any]:
    """Each run's (tokens, accepted, rounds); ``profiled`` gets what each device's profile
    timed; ``worker_dtype``: the workers' own ``--dtype``."""
    results, stages = run_on_devices(_requests, world, *model_and_heads, runs, kv, worker_dtype=worker_dtype)
    if profiled is not None:
        profiled.extend(stages)
    return results  # type: ignore[no-any-return]


@pytest.mark.parametrize("world", [1, 2, 3])
def test_greedy_speculative_decoding_writes_plain_decodings_text(
    model_and_heads: tuple[str, str], world: int
) -> None:
    naive, chain, wide, sized = _run(model_and_heads, world, [
        {}, {"decode": "sd", "adaptive_tree": False},
        {"decode": "sd", "tree_width": 2, "adaptive_tree": False}, {"decode": "sd", "tree_width": 2},
    ])  # fmt: skip
    assert chain[0] == naive[0] and wide[0] == naive[0] and sized[0] == naive[0]
    assert chain[1] > 0 and wide[1] > 0  # the heads' guesses were accepted ...
    assert chain[2] < len(naive[0]) - 1  # ... so fewer passes than tokens


def test_static_caches_on_two_devices_write_the_dynamic_caches_text(model_and_heads: tuple[str, str]) -> None:
    """The GPU path's stages (``--kv static``), run here on the CPU through the same wire;
    both devices were profiled (and their layers planned) as static-cache stages. The
    dynamic cache's text is plain decoding's (the greedy test), computed here in process."""
    from coinfer.models.load import load_model
    from tests.conftest import plain

    dynamic = plain(load_model(model_and_heads[0], backend="transformers"), PROMPT, 32).tokens
    profiled: list[str] = []
    naive, sd, sampled, sampled_sd = _run(model_and_heads, 2, [
        {}, {"decode": "sd", "tree_width": 2}, {"sampling": {"temperature": 0.9, "seed": 7}},
        {"decode": "sd", "sampling": {"temperature": 0.9, "seed": 7}},
    ], kv="static", profiled=profiled)  # fmt: skip
    assert profiled == ["static cpu float32"] * 2
    assert naive[0] == dynamic and sd[0] == dynamic
    assert sd[1] > 0 and sd[2] < len(dynamic) - 1  # the heads' trees were verified and kept
    assert sampled_sd[0] == sampled[0]


def test_a_device_runs_its_own_dtype_and_is_profiled_in_it(model_and_heads: tuple[str, str]) -> None:
    """A worker started with ``--dtype bfloat16`` (say, a GPU without float32 speed) runs
    and is profiled in bfloat16 beside a float32 rank 0; speculative decoding through the
    mixed pipeline still writes that pipeline's plain text."""
    profiled: list[str] = []
    naive, sd = _run(model_and_heads, 2, [{}, {"decode": "sd", "tree_width": 2}], kv="static",
                     profiled=profiled, worker_dtype="bfloat16")  # fmt: skip
    assert profiled == ["static cpu float32", "static cpu bfloat16"]
    assert sd[0] == naive[0] and sd[1] > 0


def test_sampled_speculative_decoding_writes_plain_decodings_text_for_a_seed(
    model_and_heads: tuple[str, str],
) -> None:
    sampled = {"temperature": 0.9, "seed": 7}
    naive, sd, other = _run(model_and_heads, 2, [
        {"sampling": dict(sampled)}, {"decode": "sd", "sampling": dict(sampled)},
        {"decode": "sd", "sampling": {"temperature": 0.9, "seed": 8}},
    ])  # fmt: skip
    assert sd[0] == naive[0]
    assert other[0] != naive[0]  # the seed decides, not the heads


def test_heads_of_another_model_are_refused(model_and_heads: tuple[str, str], tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    from coinfer.engines.jupiter import EdgeCluster
    from coinfer.errors import ConfigError
    from coinfer.models.heads import DraftHeads

    cluster = EdgeCluster(str(tiny_dirs["qwen2"]), world=1, master="127.0.0.1:1", threads=1)
    try:
        with pytest.raises(ConfigError, match="trained for tiny"):
            cluster.use_heads(DraftHeads.load(model_and_heads[1]))
    finally:
        cluster.close()


def test_the_last_device_guesses_only_among_the_heads_vocabulary(
    model_and_heads: tuple[str, str], tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """With every token to guess among, the same run's guesses hold (the greedy test on two
    devices); with none of the text's tokens in the heads' vocabulary, none hold and the
    text is still plain decoding's (computed here in process, one pipeline fewer)."""
    import torch

    from coinfer.models.heads import DraftHeads
    from coinfer.models.load import load_model
    from tests.conftest import plain

    path, heads_dir = model_and_heads
    naive = plain(load_model(path, backend="transformers"), PROMPT, 32).tokens
    heads = DraftHeads.load(heads_dir)
    heads.vocab = torch.tensor([t for t in range(max(naive) + 2) if t not in set(naive)])
    heads.save(tmp_path)
    (narrow,) = _run((path, str(tmp_path)), 2, [{"decode": "sd", "adaptive_tree": False}])
    assert narrow[0] == naive and narrow[1] == 0  # none of the text's tokens to guess: none hold
