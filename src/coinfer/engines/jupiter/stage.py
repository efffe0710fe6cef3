"""One pipeline stage of a transformers causal LM (Qwen2, Llama): the decoder layers
``[start, stop)`` of the model, its own KV cache, and the embedding (first stage) or the
final norm and the head (last stage).

``Stage.forward(x, position)`` takes token ids (first stage) or the previous stage's hidden
states (later stages) for the tokens at ``position, position + 1, …`` and returns hidden
states (or logits, on the last stage). Each call appends to the stage's cache, so a prompt
may arrive in sub-sequences (Jupiter's intra-sequence pipelined prefill, paper 004 §IV-A):
a sub-sequence attends to the cached keys of the ones before it, as causal attention
needs. ``truncate`` rolls the cache back.

The stage keeps the model's own modules; the layers it does not hold are dropped, and its
layers' cache slots are renumbered from 0 so the stage's cache holds only its own.
"""

from __future__ import annotations

from typing import Any

from coinfer.errors import ConfigError

__all__ = ["Stage"]


class Stage:
    """Layers ``[start, stop)`` of ``model`` (a transformers ``*ForCausalLM``), which this
    stage takes over: the modules it does not need are released."""

    def __init__(self, model: Any, start: int, stop: int) -> None:
        import torch

        inner = model.model
        n_layers = len(inner.layers)
        if not 0 <= start < stop <= n_layers:
            raise ConfigError(f"a stage needs layers within 0..{n_layers}, got [{start}, {stop})")
        self.start, self.stop, self.n_layers = start, stop, n_layers
        self.first, self.last = start == 0, stop == n_layers
        self.model = model
        self.config = model.config
        kept = list(inner.layers)[start:stop]
        for i, layer in enumerate(kept):
            layer.self_attn.layer_idx = i
        inner.layers = torch.nn.ModuleList(kept)
        types = list(getattr(self.config, "layer_types", None) or ["full_attention"] * n_layers)
        self.config.layer_types = types[start:stop]
        self.config.num_hidden_layers = stop - start
        if not self.first:
            inner.embed_tokens = None
        if not self.last:
            inner.norm = torch.nn.Identity()
            model.lm_head = None
        self.cache: Any = None
        self.reset()

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.config)

    @property
    def length(self) -> int:
        """Tokens this stage's cache holds."""
        return int(self.cache.get_seq_length())

    def forward(self, x: Any, position: int) -> Any:
        """Token ids ``(1, n)`` on the first stage, hidden states ``(1, n, hidden)`` after;
        ``position`` must be the cache's length (the tokens arrive in order). Hidden
        states out, or logits ``(1, n, vocab)`` on the last stage."""
        import torch

        if position != self.length:
            raise ConfigError(
                f"stage {self.start}-{self.stop} holds {self.length} tokens, got position {position}"
            )
        n = int(x.shape[1])
        positions = torch.arange(position, position + n).unsqueeze(0)
        with torch.inference_mode():
            kwargs: dict[str, Any] = {"input_ids": x} if self.first else {"inputs_embeds": x}
            out = self.model.model(
                **kwargs, position_ids=positions, past_key_values=self.cache, use_cache=True
            )
            hidden = out.last_hidden_state
            return self.model.lm_head(hidden) if self.last else hidden

    def truncate(self, length: int) -> None:
        """Forget every token from ``length`` on."""
        if length < self.length:
            self.cache.crop(length - self.length)  # this transformers crops by a negative count
