"""Jupiter's stage on static KV caches (``StaticStage``, the GPU path of issue 23) against
the dynamic-cache ``Stage`` on a tiny random model, on the CPU: the same outputs for
prompts read in pieces, decoding, roll-backs, the heads' trees and their committed paths,
outline decoding's branches and the entries they drop, with forwards padded to the few
widths a GPU captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import HAS_TORCH

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")


def _model(path: Path):  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _pair(path: Path, start: int, stop: int, **kw):  # type: ignore[no-untyped-def]
    """The dynamic-cache stage and the static one of the same layers."""
    from coinfer.engines.jupiter.stage import Stage
    from coinfer.engines.jupiter.static_stage import StaticStage

    return Stage(_model(path), start, stop), StaticStage(_model(path), start, stop, n_ctx=256, **kw)


def _ids(n: int, seed: int):  # type: ignore[no-untyped-def]
    import torch

    return torch.randint(3, 300, (1, n), generator=torch.Generator().manual_seed(seed))


def _close(a, b) -> bool:  # type: ignore[no-untyped-def]
    import torch

    return a.shape == b.shape and torch.allclose(a.float().cpu(), b.float().cpu(), atol=1e-4)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("pad", [False, True])
def test_static_stages_in_a_row_give_the_dynamic_stages_outputs(tiny_dirs, arch: str, pad: bool) -> None:  # type: ignore[no-untyped-def]
    path = tiny_dirs[arch]
    first, last = _pair(path, 0, 1, pad_widths=pad), _pair(path, 1, 2, pad_widths=pad)
    ids, position = _ids(12, 1), 0
    for n in (5, 4, 3):  # a prompt in sub-sequences, then a token, a roll-back and the token again
        x = ids[:, position : position + n]
        middle = [stage.forward(x, position) for stage in first]
        assert _close(*middle) and middle[1].dtype.is_floating_point and middle[1].device.type == "cpu"
        assert _close(*(stage.forward(h, position) for stage, h in zip(last, middle, strict=True)))
        position += n
    for stage in (*first, *last):
        assert stage.length == 12
        stage.truncate(10)
    x = ids[:, 10:12]
    middle = [stage.forward(x, 10) for stage in first]
    assert _close(*(stage.forward(h, 10, logits="last") for stage, h in zip(last, middle, strict=True)))


@pytest.mark.parametrize("pad", [False, True])
def test_a_tree_and_its_committed_path_match_the_dynamic_stage(tiny_dirs, pad: bool) -> None:  # type: ignore[no-untyped-def]
    import torch

    dynamic, static = _pair(tiny_dirs["qwen2"], 0, 2, pad_widths=pad)
    prompt = _ids(9, 2)
    for stage in (dynamic, static):
        stage.forward(prompt, 0, logits="none")
    parents = [-1, 0, 0, 1, 2, 2, 4]  # a root, two branches, a deeper path along the second
    tree = _ids(7, 3)
    hidden = [stage.forward_tree(tree, 9, parents) for stage in (dynamic, static)]
    assert _close(*hidden)
    assert _close(*(stage.head(h[0]) for stage, h in zip((dynamic, static), hidden, strict=True)))
    chosen = [stage.choices(h[0]) for stage, h in zip((dynamic, static), hidden, strict=True)]
    assert chosen[0].shape == (7,) and (chosen[0] == chosen[1]).all()  # greedy ids, read back alone
    for stage in (dynamic, static):
        stage.commit(9, [0, 2, 4])  # not the tree's first nodes: the kept columns move down
        assert stage.length == 12
    nxt = torch.tensor([[11]])
    assert _close(*(stage.forward(nxt, 12, logits="last") for stage in (dynamic, static)))
    assert _close(*(stage.forward(nxt, 13, logits="hidden") for stage in (dynamic, static)))


def test_branches_and_the_entries_they_drop_match_the_dynamic_stage(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    dynamic, static = _pair(tiny_dirs["llama"], 0, 2, pad_widths=True)
    for stage in (dynamic, static):
        stage.forward(_ids(8, 4), 0, logits="none")
    # three branches' first nodes at their own positions, then each branch's next two
    calls = [
        (_ids(3, 5), [8, 8, 8], [0, 1, 2], [-1, -1, -1]),
        (_ids(4, 6), [9, 10, 9, 9], [0, 0, 2, 1], [-1, 0, -1, -1]),
    ]
    for x, positions, branches, parents in calls:
        assert _close(*(s.forward_branches(x, positions, branches, parents) for s in (dynamic, static)))
    for stage in (dynamic, static):
        stage.drop([9, 12])  # a branch's refused guess and another branch's node
        assert stage.labels == [-1] * 8 + [0, 2, 0, 2, 1]
    x = _ids(2, 7)
    assert _close(*(s.forward_branches(x, [11, 10], [0, 1], [-1, -1]) for s in (dynamic, static)))


def test_the_heads_guess_the_same_from_either_stage(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    import torch

    from coinfer.models.heads import DraftHeads, HeadsMeta

    dynamic, static = _pair(tiny_dirs["qwen2"], 0, 2)
    d = int(static.config.hidden_size)
    g = torch.Generator().manual_seed(8)
    heads = DraftHeads(
        torch.randn(3, d, d, generator=g) * 0.1, torch.randn(3, d, generator=g), HeadsMeta("", "", d, 3)
    )
    hidden = [stage.forward(_ids(6, 9), 0, logits="hidden") for stage in (dynamic, static)]
    guesses = [stage.guesses(heads, h[None], 2) for stage, h in zip((dynamic, static), hidden, strict=True)]
    assert guesses[0].shape == (1, 3, 2) and torch.equal(guesses[0], guesses[1])


def test_a_static_stage_refuses_out_of_order_tokens_and_a_full_context(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    from coinfer.engines.jupiter.static_stage import StaticStage
    from coinfer.errors import ConfigError, SequenceError

    stage = StaticStage(_model(tiny_dirs["llama"]), 0, 2, n_ctx=16)
    with pytest.raises(ConfigError, match="holds 0 tokens"):
        stage.forward(_ids(2, 1), 3)
    stage.forward(_ids(12, 1), 0, logits="none")
    with pytest.raises(SequenceError, match="context of 16 tokens is full"):
        stage.forward(_ids(5, 2), 12)
    assert stage.length == 12  # the refused tokens were not kept
    assert stage.forward(_ids(4, 2), 12, logits="last").shape[:2] == (1, 1)


def test_a_static_stage_read_alone_from_disk_matches_the_whole_models_logits(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    import torch

    from coinfer.engines.jupiter.static_stage import StaticStage

    path = tiny_dirs["qwen2"]
    ids = _ids(9, 3)
    with torch.inference_mode():
        expected = _model(path)(ids).logits
    stages = [StaticStage.load(path, 0, 1, n_ctx=64), StaticStage.load(path, 1, 2, n_ctx=64)]
    assert _close(stages[1].forward(stages[0].forward(ids, 0), 0), expected)


def test_a_static_stage_loads_in_the_dtype_asked_and_float32_by_default_on_the_cpu(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    import torch

    from coinfer.engines.jupiter.static_stage import open_stage
    from coinfer.errors import ConfigError

    path = tiny_dirs["qwen2"]
    assert open_stage(path, 0, 2, kv="static").dtype == torch.float32
    half = open_stage(path, 0, 2, kv="static", dtype="bfloat16")
    assert half.dtype == torch.bfloat16
    full = open_stage(path, 0, 2, kv="static")
    ids = _ids(6, 4)
    a, b = half.forward(ids, 0, logits="last"), full.forward(ids, 0, logits="last")
    assert a.dtype == torch.float32  # logits come back float32, near the float32 stage's
    assert float((a - b).norm() / b.norm()) < 0.05
    with pytest.raises(ConfigError, match="runs in float32"):
        open_stage(path, 0, 2, kv="dynamic", dtype="bfloat16")
    with pytest.raises(ConfigError, match="unknown dtype"):
        open_stage(path, 0, 2, kv="static", dtype="int8")


def test_a_stage_on_a_device_this_machine_lacks_is_one_line_not_a_traceback(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    """The range is read straight onto the stage's device, tensor by tensor (on a GPU the
    host never holds it whole); where the device does not exist, that is said plainly."""
    import torch

    from coinfer.engines.jupiter.static_stage import open_stage
    from coinfer.errors import ConfigError

    bad = "cpu:x" if torch.cuda.is_available() else "cuda"
    with pytest.raises(ConfigError, match="cannot place the stage") as caught:
        open_stage(tiny_dirs["qwen2"], 0, 2, kv="static", device=bad)
    assert caught.value.hint == "use --device cpu"
