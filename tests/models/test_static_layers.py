"""The fused decoder's steps: each equals the plain computation it replaces."""

from __future__ import annotations

import pytest

from tests.conftest import needs_torch

pytestmark = needs_torch


def test_top_choice_is_argmax_with_its_first_index_on_ties() -> None:
    import torch

    from coinfer.models.static_layers import top_choice

    gen = torch.Generator().manual_seed(0)
    for vocab in (640, 1000):  # split into 64 chunks, and a vocabulary that is not
        for _ in range(50):
            logits = torch.randint(0, 4, (2, 3, vocab), generator=gen).float()
            assert torch.equal(top_choice(logits), logits.argmax(-1))


def test_attend_equals_scaled_dot_product_attention() -> None:
    import torch

    from coinfer.models.static_layers import attend

    q, k, v = torch.randn(1, 2, 6, 16), torch.randn(1, 2, 40, 16), torch.randn(1, 2, 40, 16)
    mask = torch.zeros(1, 1, 6, 40)
    mask[..., 30:] = torch.finfo(torch.float32).min
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.25)
    torch.testing.assert_close(attend(q, k, v, mask, 0.25), want)


def test_rope_split_rotates_like_transformers_and_stacks_queries_per_kv_head() -> None:
    import torch
    from transformers.models.qwen2.modeling_qwen2 import apply_rotary_pos_emb

    from coinfer.models.static_layers import rope_split

    b, w, nq, nkv, d = 2, 3, 4, 2, 8
    qkv = torch.randn(b, w, nq + 2 * nkv, d)
    cos, sin = torch.randn(b, w, d), torch.randn(b, w, d)
    queries, keys, values = rope_split(qkv, cos[:, :, None], sin[:, :, None], nq, nkv, None, None, 1e-6)
    q_ref, k_ref = apply_rotary_pos_emb(
        qkv[:, :, :nq].transpose(1, 2), qkv[:, :, nq : nq + nkv].transpose(1, 2), cos, sin
    )
    torch.testing.assert_close(keys, k_ref.transpose(1, 2))
    # query head h belongs to key/value head h // group; its w rows sit at group position h % group
    stacked = queries.view(b, nkv, nq // nkv, w, d)
    for h in range(nq):
        torch.testing.assert_close(stacked[:, h // 2, h % 2], q_ref[:, h])
    assert torch.equal(values, qkv[:, :, nq + nkv :])


@pytest.mark.parametrize("act", ["gelu"])
def test_activations_other_than_silu_are_not_fused(act: str) -> None:
    from transformers import LlamaConfig

    from coinfer.models.static_layers import fused_layers_unsupported

    assert "activation" in (fused_layers_unsupported(LlamaConfig(hidden_act=act)) or "")
    assert fused_layers_unsupported(LlamaConfig()) is None
