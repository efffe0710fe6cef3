"""Stages of a tiny random model, run one after another in this process: the logits equal
the whole model's, for a prompt read at once, read in sub-sequences (intra-sequence
pipelined prefill), and decoded on token by token."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import HAS_TORCH

pytestmark = pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")


def _load(path: Path):  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


def _stages(path: Path, bounds: list[int]):  # type: ignore[no-untyped-def]
    from coinfer.engines.jupiter.stage import Stage

    return [Stage(_load(path), a, b) for a, b in zip(bounds, bounds[1:], strict=False)]


def _through(stages, ids, position: int):  # type: ignore[no-untyped-def]
    x = ids
    for stage in stages:
        x = stage.forward(x, position)
    return x


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("parts", [(12,), (5, 4, 3), (1, 11)])
def test_stages_in_a_row_give_the_whole_models_logits(tiny_dirs, arch: str, parts: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    import torch

    path = tiny_dirs[arch]
    whole = _load(path)
    ids = torch.randint(3, whole.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = whole(ids).logits
    n_layers = whole.config.num_hidden_layers
    stages = _stages(path, [0, 1, n_layers] if n_layers > 1 else [0, 1])
    got, position = [], 0
    for n in parts:  # the prompt arrives in sub-sequences; each stage keeps the earlier ones' keys
        got.append(_through(stages, ids[:, position : position + n], position))
        position += n
    assert torch.allclose(torch.cat(got, dim=1), expected, atol=1e-4)
    # then decoding, token by token, and a roll-back
    nxt = expected[:, -1].argmax(-1, keepdim=True)
    with torch.inference_mode():
        after = whole(torch.cat([ids, nxt], dim=1)).logits[:, -1]
    assert torch.allclose(_through(stages, nxt, 12)[:, -1], after, atol=1e-4)
    for stage in stages:
        stage.truncate(12)
    assert torch.allclose(_through(stages, nxt, 12)[:, -1], after, atol=1e-4)


def test_a_stage_refuses_tokens_out_of_order(tiny_dirs) -> None:  # type: ignore[no-untyped-def]
    import torch

    from coinfer.errors import ConfigError

    (stage,) = _stages(tiny_dirs["llama"], [0, 2])
    with pytest.raises(ConfigError, match="holds 0 tokens"):
        stage.forward(torch.tensor([[5, 6]]), 3)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_a_stage_read_alone_from_disk_equals_the_pruned_whole_model(tiny_dirs, arch: str) -> None:  # type: ignore[no-untyped-def]
    import torch

    from coinfer.engines.jupiter.stage import Stage

    path = tiny_dirs[arch]
    ids = torch.randint(3, 300, (1, 9), generator=torch.Generator().manual_seed(2))
    pruned = [Stage(_load(path), 0, 1), Stage(_load(path), 1, 2)]
    alone = [Stage.load(path, 0, 1), Stage.load(path, 1, 2)]
    assert alone[0].model.lm_head is None and alone[1].model.model.embed_tokens is None
    assert torch.allclose(_through(alone, ids, 0), _through(pruned, ids, 0), atol=1e-6)


def test_a_tied_models_whole_range_loads_its_head_from_the_embedding(tmp_path: Path) -> None:
    """Qwen2.5's small models tie the head to the embedding and store it once: one device
    holding every layer (``--devices 1``) still gets its head, shared, not copied."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from coinfer.engines.jupiter.stage import Stage

    config = Qwen2Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    whole = AutoModelForCausalLM.from_config(config).eval()
    whole.save_pretrained(tmp_path)
    stage = Stage.load(tmp_path, 0, 2)
    assert stage.model.lm_head.weight is stage.model.model.embed_tokens.weight
    ids = torch.randint(3, 300, (1, 7), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected = whole(ids).logits
    assert torch.allclose(stage.forward(ids, 0), expected, atol=1e-5)
