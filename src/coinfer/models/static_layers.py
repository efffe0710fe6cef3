"""The decoder of a Llama-family model rewritten for static caches in few kernels.

On a GPU a small model's forward is a chain of tiny kernels, each costing about 3 µs
whatever it computes; replaying them as a CUDA graph removes the CPU's launches but not
the kernels. transformers' own layers run several times more kernels than needed; this
forward, with the model's own weights and math, runs about fifteen per layer (425 in a
1.5B forward, counted on an H100):

- the query, key and value projections as one matrix product (their weights
  concatenated once; the model's own modules keep views of them), likewise gate and up;
- the elementwise steps compiled by ``torch.compile`` into a kernel each (on a GPU):
  residual add with RMS norm; rotary embedding with the grouped-query stacking, where
  each key/value head's queries are stacked along the query axis so that attention reads
  the cache as it is, with no copy per query head; SiLU times up; and the attention's
  scale, mask and softmax between its two matrix products (the library attention
  kernels cost several times more at decode shapes);
- the new keys and values written straight into the sequences' slots.

The same code runs uncompiled on the CPU, where the tests check it against transformers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "StaticDecoder",
    "add_norm",
    "attend",
    "fused_layers_unsupported",
    "fused_weights_unsupported",
    "greedy_ids",
    "rope_split",
    "silu_mul",
    "top_choice",
]


def fused_layers_unsupported(config: Any) -> str | None:
    """Why the fused decoder cannot run a model of ``config``, or None."""
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r} (the fused decoder runs SiLU-gated MLPs)"
    if getattr(config, "mlp_bias", False):
        return "MLP biases"
    return None


def fused_weights_unsupported(model: Any) -> str | None:
    """Why fusing ``model``'s q/k/v projections would lose something, or None: a bias on
    some of them and not on the others (fused, the three take one bias or none)."""
    for layer in model.model.layers:
        attn = layer.self_attn
        biased = [m.bias is not None for m in (attn.q_proj, attn.k_proj, attn.v_proj)]
        if any(biased) and not all(biased):
            return "q/k/v projections of which only some have biases"
    return None


@dataclass
class _Layer:
    """One decoder layer's weights, the projections fused; each RMS norm as (weight, eps)."""

    norm_in: tuple[Any, float]
    qkv: Any
    qkv_bias: Any
    qk_norms: tuple[Any, Any, float]  # Qwen3's per-head query and key norms: (None, None, 0) if none
    out: Any
    out_bias: Any
    norm_post: tuple[Any, float]
    gate_up: Any
    down: Any


def _fuse(torch: Any, modules: list[Any]) -> tuple[Any, Any]:
    """The linear ``modules``' weights (and biases) as one tensor, each module keeping a
    view of its rows, so the model holds them once."""
    weight = torch.cat([m.weight.detach() for m in modules], 0)
    has_bias = [m.bias is not None for m in modules]
    bias = torch.cat([m.bias.detach() for m in modules], 0) if all(has_bias) else None
    at = 0
    for m in modules:
        n = m.weight.shape[0]
        m.weight = torch.nn.Parameter(weight[at : at + n], requires_grad=False)
        if bias is not None:
            m.bias = torch.nn.Parameter(bias[at : at + n], requires_grad=False)
        at += n
    return weight, bias


def _layer(torch: Any, layer: Any) -> _Layer:
    attn, mlp = layer.self_attn, layer.mlp
    qkv, qkv_bias = _fuse(torch, [attn.q_proj, attn.k_proj, attn.v_proj])
    gate_up, _ = _fuse(torch, [mlp.gate_proj, mlp.up_proj])
    q_norm = getattr(attn, "q_norm", None)  # Qwen3 normalizes each head's queries and keys
    qk_norms = (None, None, 0.0) if q_norm is None else (q_norm.weight, attn.k_norm.weight, _eps(q_norm))
    return _Layer(
        norm_in=_norm(layer.input_layernorm),
        qkv=qkv,
        qkv_bias=qkv_bias,
        qk_norms=qk_norms,
        out=attn.o_proj.weight,
        out_bias=attn.o_proj.bias,
        norm_post=_norm(layer.post_attention_layernorm),
        gate_up=gate_up,
        down=mlp.down_proj.weight,
    )


def _norm(module: Any) -> tuple[Any, float]:
    return module.weight, _eps(module)


def _eps(norm: Any) -> float:
    """An RMS norm module's epsilon (transformers names it ``variance_epsilon``)."""
    for name in ("variance_epsilon", "eps"):
        value = getattr(norm, name, None)
        if value is not None:
            return float(value)
    return 1e-6


def add_norm(hidden: Any, delta: Any, weight: Any, eps: float) -> tuple[Any, Any]:
    """The residual sum and its RMS norm (one kernel once compiled)."""
    import torch

    hidden = hidden + delta
    return hidden, torch.nn.functional.rms_norm(hidden, (hidden.shape[-1],), weight, eps)


def rope_split(qkv: Any, cos: Any, sin: Any, nq: int, nkv: int, q_norm: Any, k_norm: Any, eps: float) -> Any:
    """Queries stacked per key/value head (b, nkv, group * w, d), rotated keys (b, w, nkv, d)
    and values (b, w, nkv, d) out of the fused projection ``qkv`` (b, w, nq + 2 nkv, d)."""
    import torch

    b, w, d = qkv.shape[0], qkv.shape[1], qkv.shape[3]
    q, k = qkv[:, :, :nq], qkv[:, :, nq : nq + nkv]
    if q_norm is not None:
        q = torch.nn.functional.rms_norm(q, (d,), q_norm, eps)
        k = torch.nn.functional.rms_norm(k, (d,), k_norm, eps)
    half = d // 2
    q = q * cos + torch.cat([-q[..., half:], q[..., :half]], -1) * sin
    k = k * cos + torch.cat([-k[..., half:], k[..., :half]], -1) * sin
    group = nq // nkv
    queries = q.reshape(b, w, nkv, group, d).permute(0, 2, 3, 1, 4).reshape(b, nkv, group * w, d)
    return queries, k, qkv[:, :, nq + nkv :]


def attend(queries: Any, keys: Any, values: Any, mask: Any, scale: float) -> Any:
    """Attention of few queries over a masked cache, softmax in float32: once compiled,
    two matrix products and one fused kernel between them (the library kernels are built
    for long query blocks and cost several times more at decode shapes)."""
    import torch

    scores = torch.matmul(queries, keys.transpose(-1, -2)).float() * scale + mask
    return torch.matmul(torch.softmax(scores, -1).to(queries.dtype), values)


def silu_mul(gate_up: Any) -> Any:
    """SiLU of the gate times the up projection, both halves of ``gate_up``."""
    import torch

    gate, up = gate_up.chunk(2, -1)
    return torch.nn.functional.silu(gate) * up


def top_choice(logits: Any) -> Any:
    """argmax over the vocabulary in two steps (the first index of the maximum, as
    ``argmax``): one block per row reads a 150k vocabulary slowly, 64 per row do not."""
    vocab = logits.shape[-1]
    if vocab % 64:
        return logits.argmax(-1)
    chunks = logits.reshape(*logits.shape[:-1], 64, vocab // 64)
    best, where = chunks.max(-1)
    chunk = best.argmax(-1, keepdim=True)
    return (chunk * (vocab // 64) + where.gather(-1, chunk)).squeeze(-1)


def greedy_ids(logits: Any) -> Any:
    """Each row's argmax as int64 numpy ids: taken on a GPU (``top_choice``), so one id per
    row crosses to the host; on the CPU by numpy, which reads a 150k vocabulary about ten
    times faster than torch's argmax (0.02 against 0.3 ms a row, one thread)."""
    if logits.device.type == "cpu":
        return np.argmax(logits.float().numpy(), axis=-1)
    return top_choice(logits).cpu().numpy()


def _can_compile() -> bool:
    """Whether ``torch.compile`` can generate GPU kernels here (it needs Triton); without
    it the steps run unfused, slower but the same."""
    try:
        from torch.utils._triton import has_triton
    except ImportError:
        return False
    return bool(has_triton())


def _allow_recompiles(torch: Any) -> None:
    """Each model (a draft and its target in one process) compiles the steps again for its
    sizes, and batch 1 and width 1 get their own versions: more than dynamo's default
    limit of 8 per function, past which it silently falls back to unfused kernels."""
    import warnings

    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 64))
    warnings.filterwarnings("ignore", message="Online softmax is disabled")


class StaticDecoder:
    """The forward of a Llama-family causal LM over static key/value buffers
    (slots, kv_heads, length, head_dim) per layer. ``fuse``: the elementwise steps
    compiled by ``torch.compile`` into a kernel each (on a GPU)."""

    def __init__(self, torch: Any, model: Any, *, fuse: bool = False) -> None:
        config = model.config
        self.torch = torch
        self.core, self.head = model.model, model.lm_head
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.scale = self.core.layers[0].self_attn.scaling
        with torch.no_grad():
            self.layers = [_layer(torch, layer) for layer in self.core.layers]
        # a layer range of a pipeline stage (``layer_range.keep_layers``): the embedding only
        # on the first, the final norm (a real one, not ``Identity``) only on the last
        self.first = getattr(self.core, "embed_tokens", None) is not None
        self.last = getattr(self.core.norm, "weight", None) is not None
        # the norm each layer's output goes through next: the next layer's, then the final
        # one (none after a middle stage's last layer: its residual stream goes on)
        final = _norm(self.core.norm) if self.last else None
        self.next_norms: list[tuple[Any, float] | None] = [layer.norm_in for layer in self.layers[1:]]
        self.next_norms.append(final)
        steps = (add_norm, rope_split, silu_mul, attend)
        self.fused = fuse and _can_compile()
        if self.fused:
            _allow_recompiles(torch)
            steps = tuple(torch.compile(step, dynamic=True) for step in steps)
        self.add_norm, self.rope_split, self.silu_mul, self.attend = steps

    def hidden_states(
        self,
        x: Any,
        positions: Any,
        columns: Any,
        slots: Any,
        mask: Any,
        keys: list[Any],
        values: list[Any],
        rows: slice | None,
    ) -> Any:
        """The new tokens' hidden states (b, w, hidden), their keys and values written at
        ``columns`` of ``slots``; ``x``: token ids (b, w) where the decoder has the embedding,
        else the previous stage's hidden states; ``positions``: their rope positions; ``mask``
        (b, 1, w, span) additive; ``rows``: the slots as a slice when they are consecutive
        (the cache then read in place). Out come the final norm's outputs (what ``head``
        reads) on the last stage, else the residual stream the next stage takes."""
        torch, linear = self.torch, self.torch.nn.functional.linear
        hidden = self.core.embed_tokens(x) if self.first else x
        cos, sin = (t[:, :, None, :] for t in self.core.rotary_emb(hidden, positions))
        group = self.heads // self.kv_heads
        b, w, span = hidden.shape[0], hidden.shape[1], mask.shape[-1]
        packed_mask = mask[:, :, None].expand(b, 1, group, w, span).reshape(b, 1, group * w, span)
        weight, eps = self.layers[0].norm_in
        normed = torch.nn.functional.rms_norm(hidden, (hidden.shape[-1],), weight, eps)
        for i, (layer, k_cache, v_cache) in enumerate(zip(self.layers, keys, values, strict=True)):
            attended = self._attention(
                layer, normed, cos, sin, packed_mask, (k_cache, v_cache), (slots, columns, rows)
            )
            hidden, normed = self.add_norm(hidden, attended, *layer.norm_post)
            mixed = linear(self.silu_mul(linear(normed, layer.gate_up)), layer.down)
            after = self.next_norms[i]
            if after is None:
                return hidden + mixed
            hidden, normed = self.add_norm(hidden, mixed, *after)
        return normed

    def _attention(
        self,
        layer: _Layer,
        x: Any,
        cos: Any,
        sin: Any,
        mask: Any,
        cache: tuple[Any, Any],
        where: tuple[Any, Any, Any],
    ) -> Any:
        torch, nq, nkv, d = self.torch, self.heads, self.kv_heads, self.head_dim
        b, w = x.shape[0], x.shape[1]
        qkv = torch.nn.functional.linear(x, layer.qkv, layer.qkv_bias).view(b, w, nq + 2 * nkv, d)
        queries, k, v = self.rope_split(qkv, cos, sin, nq, nkv, *layer.qk_norms)
        slots, columns, rows = where
        k_cache, v_cache = cache
        k_cache[slots[:, None], :, columns] = k
        v_cache[slots[:, None], :, columns] = v
        span = mask.shape[-1]
        if rows is None:
            keys, vals = (c[:, :, :span].index_select(0, slots) for c in (k_cache, v_cache))
        else:
            keys, vals = k_cache[rows, :, :span], v_cache[rows, :, :span]
        out = self.attend(queries, keys, vals, mask, self.scale)
        out = out.view(b, nkv, nq // nkv, w, d).permute(0, 3, 1, 2, 4).reshape(b, w, nq * d)
        return torch.nn.functional.linear(out, layer.out, layer.out_bias)
