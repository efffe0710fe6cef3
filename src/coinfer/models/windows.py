"""Sliding-window attention, as transformers applies it, for the paths that build their own
attention masks (trees, static caches, pipeline stages).

A layer with a window of ``W`` tokens lets the token at position ``p`` see the cached
entry at position ``j`` only where ``p - j < W``. Mistral's layers all apply
``config.sliding_window``; a model with ``layer_types`` applies it in its
"sliding_attention" layers alone. Where the window covers the whole context it changes
nothing, and no path needs to know of it.
"""

from __future__ import annotations

from typing import Any

from coinfer.errors import ModelError

__all__ = ["layer_types", "refuse_window", "window_within"]


def layer_types(config: Any) -> list[str]:
    """Each layer's kind of attention ("full_attention", "sliding_attention"), as
    transformers infers them where the config names none: every layer slides the window
    where the config has one (Mistral)."""
    kinds = getattr(config, "layer_types", None)
    if kinds:
        return list(kinds)
    kind = "sliding_attention" if getattr(config, "sliding_window", None) else "full_attention"
    return [kind] * int(config.num_hidden_layers)


def window_within(config: Any, n_ctx: int) -> int | None:
    """The window the model's windowed layers slide, where it is shorter than a context of
    ``n_ctx`` tokens (so that it hides something); else None."""
    window = getattr(config, "sliding_window", None)
    if not window or window >= n_ctx or "sliding_attention" not in layer_types(config):
        return None
    return int(window)


def refuse_window(config: Any, n_ctx: int, what: str) -> None:
    """Refuse a sliding window that hides part of a context of ``n_ctx`` tokens, for ``what``
    (a path whose masks let every token see the whole context)."""
    window = window_within(config, n_ctx)
    if window is not None:
        raise ModelError(
            f"{what} attends over the whole context, and this model's layers slide a window of "
            f"{window} tokens over a context of {n_ctx}",
            hint=f"pass --ctx {window} or less",
        )
