"""A pipeline stage on static KV caches, its forwards CUDA graphs on a GPU (issue 23).

``Stage`` runs transformers' own layers over a ``DynamicCache``. On a GPU that forward is
launch-bound (hundreds of microsecond kernels queued from Python), so a tree of 16 costs
about what a token costs, and both cost ten times the weights' read. ``StaticStage`` does
what ``Stage`` does, with the same methods, over the buffers and the fused decoder of
``models.hf_static``:

- **One sequence's static cache.** Per layer, key and value buffers (1, kv heads, n_ctx + 1,
  head dim), allocated at load. Cache entry i is column i, as in ``Stage``, so the labels
  (-1 shared, b: outline branch b's own) mean the same; column n_ctx is scratch, where
  padding tokens write. Committing a tree path and dropping entries move columns down;
  truncating changes only the length.
- **One forward for chains, trees and branches.** Its inputs are data: ids (or the
  previous stage's hidden states), rope positions, write columns and which of the first
  ``span`` columns each new token sees. So one graph per (width, span) serves plain
  decoding, the heads' trees (paper 004 §V-A) and outline decoding's branches (§V-B); on
  a GPU widths are padded to ``static_graphs.WIDTHS``. Prompt pieces wider than
  ``GRAPH_WIDTH`` run without a graph, in chunks of 512.
- **What comes back.** A middle stage's outputs go on the wire, so they come back as
  float32 on the host. The last stage's hidden states stay on its device, where ``head``
  and ``guesses`` (the draft heads) read them; logits come back as float32 on the host.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from coinfer.engines.jupiter.stage import Stage, entries_kept, forward_output
from coinfer.errors import ConfigError, ModelError, SequenceError
from coinfer.models.hf_static import static_unsupported
from coinfer.models.layer_range import keep_layers, layer_count, load_layer_range
from coinfer.models.load import dtype_on
from coinfer.models.static_graphs import GRAPH_WIDTH, capture_graph, padded_width, span_for
from coinfer.models.static_layers import StaticDecoder, greedy_ids
from coinfer.models.tree import TokenTree
from coinfer.models.windows import refuse_window

__all__ = ["KV_KINDS", "StaticStage", "check_placement", "open_stage"]

KV_KINDS = ("dynamic", "static")

_PREFILL_CHUNK = 512  # the longest chain one forward takes; longer prompt pieces go in parts


class _Inputs:
    """One (width, span) forward's inputs, on the host and on the device: the stage's input
    ``x`` (ids, or hidden states in the model's dtype), positions and write columns, and
    which columns each new token sees."""

    def __init__(self, stage: StaticStage, w: int, span: int, *, pinned: bool = False) -> None:
        torch, device = stage._torch, stage.device
        shape, dtype = ((1, w), torch.long) if stage.first else ((1, w, stage.hidden), stage.dtype)
        self.w, self.span = w, span
        self.x = torch.zeros(shape, dtype=dtype, device=device)
        self.ints_host = torch.zeros(2 * w, dtype=torch.long, pin_memory=pinned)
        self.ints = torch.zeros(2 * w, dtype=torch.long, device=device)
        self.sees_host = torch.zeros((w, span), dtype=torch.bool, pin_memory=pinned)
        self.sees = torch.zeros((w, span), dtype=torch.bool, device=device)
        # a graph's host buffers are copied asynchronously: the next fill waits for that copy
        # (a prompt piece on the last stage reads nothing back, so nothing else waits)
        self.copied = torch.cuda.Event() if pinned else None

    def fill(
        self, x: Any, positions: Sequence[int], columns: Sequence[int], sees: np.ndarray, scratch: int
    ) -> None:
        """Padding rows write the scratch column and see nothing (their outputs are unread)."""
        n, w = len(positions), self.w
        if self.copied is not None:
            self.copied.synchronize()
        self.x.zero_()
        self.x[:, :n] = x.to(self.x.dtype)
        ints = self.ints_host.numpy()
        ints[:n], ints[n:w] = positions, positions[-1]
        ints[w : w + n], ints[w + n :] = columns, scratch
        view = self.sees_host.numpy()
        view[:] = False
        view[:n, : sees.shape[1]] = sees
        self.ints.copy_(self.ints_host, non_blocking=True)
        self.sees.copy_(self.sees_host, non_blocking=True)
        if self.copied is not None:
            self.copied.record()


class StaticStage:
    """Layers ``[start, stop)`` of ``model`` (a transformers ``*ForCausalLM`` on any device)
    on static caches of ``n_ctx`` tokens; ``graphs``: CUDA graphs, ``pad_widths``: forwards
    padded to a few widths (both by default on a GPU)."""

    def __init__(
        self,
        model: Any,
        start: int,
        stop: int,
        *,
        n_layers: int | None = None,
        n_ctx: int = 4096,
        graphs: bool | None = None,
        pad_widths: bool | None = None,
    ) -> None:
        import torch

        if n_layers is None:
            n_layers = layer_count(model.config)
            keep_layers(model, start, stop)
        reason = static_unsupported(model)
        if reason is not None:
            raise ModelError(
                f"layers {start}-{stop} cannot run on static KV caches: {reason}", hint="use --kv dynamic"
            )
        self.start, self.stop, self.n_layers = start, stop, n_layers
        self.first, self.last = start == 0, stop == n_layers
        self.model, self.config = model.eval(), model.config
        self._torch = torch
        self.device = next(model.parameters()).device
        self.dtype = model.dtype
        self.hidden = int(self.config.hidden_size)
        self.n_ctx = min(n_ctx, int(getattr(self.config, "max_position_embeddings", None) or n_ctx))
        refuse_window(self.config, self.n_ctx, f"stage {start}-{stop}")
        self.graphs_enabled = self.device.type == "cuda" if graphs is None else graphs
        self.pad_widths = self.graphs_enabled if pad_widths is None else pad_widths  # few shapes to capture
        self._decoder = StaticDecoder(torch, model, fuse=self.graphs_enabled)
        self._keys, self._values = self._allocate()
        self._slot = torch.zeros(1, dtype=torch.long, device=self.device)
        self._graphs: dict[tuple[int, int], tuple[Any, _Inputs, Any]] = {}
        self._pool: Any = None
        self._heads: tuple[Any, Any] | None = None  # (the heads given, their copy on this device)
        self.labels: list[int] = []  # per cache entry: -1 shared, b: outline point b's own

    @classmethod
    def load(
        cls,
        folder: str | Path,
        start: int,
        stop: int,
        *,
        device: str = "cpu",
        dtype: str | None = None,
        n_ctx: int = 4096,
    ) -> StaticStage:
        """Layers ``[start, stop)`` of the checkpoint in ``folder``, read alone in ``dtype``
        (float32 on the CPU, bfloat16 on a GPU, as ``load_model``) onto ``device`` tensor by
        tensor (the host never holds the range: on a GPU, its memory is the stage's budget)."""
        import torch

        kind = dtype_on(torch, dtype, device)
        try:
            model, n_layers = load_layer_range(folder, start, stop, dtype=kind, device=torch.device(device))
            model.to(device)  # the buffers computed on the host
        except (RuntimeError, AssertionError) as exc:
            raise ConfigError(
                f"cannot place the stage on {device!r}: {exc}", hint="use --device cpu"
            ) from exc
        return cls(model, start, stop, n_layers=n_layers, n_ctx=n_ctx)

    def _allocate(self) -> tuple[list[Any], list[Any]]:
        torch, config = self._torch, self.config
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (1, config.num_key_value_heads, self.n_ctx + 1, head_dim)
        with torch.inference_mode():
            keys = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in self.model.model.layers]
            values = [torch.zeros_like(k) for k in keys]
        return keys, values

    @property
    def graph_count(self) -> int:
        return len(self._graphs)

    @property
    def length(self) -> int:
        """Tokens this stage's cache holds."""
        return len(self.labels)

    def reset(self) -> None:
        self.labels = []

    def use(self, slot: int, *, fresh: bool = False) -> None:
        """One request at a time: the static cache has room for one (``Stage.use``)."""
        if slot != 0:
            raise ConfigError(
                "a stage on static caches holds one request's cache",
                hint="serve several requests at once on --kv dynamic",
            )
        if fresh:
            self.reset()

    # ---- the forwards (Stage's) ----------------------------------------------------------
    def forward(self, x: Any, position: int, *, logits: str = "all") -> Any:
        """As ``Stage.forward``: ids ``(1, n)`` on the first stage, hidden states after, for
        the tokens at ``position`` (the cache's length) on; each sees the whole cache."""
        if position != self.length:
            raise ConfigError(
                f"stage {self.start}-{self.stop} holds {self.length} tokens, got position {position}"
            )
        n = int(x.shape[1])
        pieces = []
        for at in range(0, n, _PREFILL_CHUNK):
            m = min(_PREFILL_CHUNK, n - at)
            before = self.length
            sees = np.concatenate([np.ones((m, before), dtype=bool), np.tril(np.ones((m, m), dtype=bool))], 1)
            self.labels.extend([-1] * m)
            pieces.append(self._run(x[:, at : at + m], range(before, before + m), sees))
        return forward_output(self, pieces[0] if len(pieces) == 1 else self._torch.cat(pieces, 1), logits)

    def forward_tree(self, x: Any, position: int, parents: Sequence[int]) -> Any:
        """As ``Stage.forward_tree``: node i at ``position + depth`` sees the shared cache,
        its ancestors and itself."""
        if position != self.length:
            raise ConfigError(
                f"stage {self.start}-{self.stop} holds {self.length} tokens, got a tree at {position}"
            )
        depths = TokenTree.of([0] * len(parents), parents).depths()
        return self.forward_branches(x, [position + d for d in depths], [-1] * len(parents), parents)

    def forward_branches(
        self, x: Any, positions: Sequence[int], branches: Sequence[int], parents: Sequence[int]
    ) -> Any:
        """As ``Stage.forward_branches``: node i of branch ``branches[i]`` sees the shared
        entries, its branch's and, among the new nodes, its ``parents`` chain and itself."""
        n = int(x.shape[1])
        if len(positions) != n or len(branches) != n or len(parents) != n:
            raise ConfigError(f"{n} nodes need as many positions, branches and parents")
        cached = np.asarray(self.labels, dtype=np.int64)
        mine = np.asarray(branches, dtype=np.int64)
        sees_cache = (cached[None, :] == -1) | (cached[None, :] == mine[:, None])
        sees = np.concatenate([sees_cache, TokenTree.of([0] * n, parents).attention_mask()], 1)
        self.labels.extend(int(b) for b in branches)
        return self._run(x, positions, sees)

    def head(self, hidden: Any) -> Any:
        """The last stage's logits for its hidden states, float32 on the host."""
        with self._torch.inference_mode():
            return self.model.lm_head(hidden.to(self.device, self.dtype)).float().cpu()

    def choices(self, hidden: Any) -> Any:
        """The greedy choice after each hidden state (n, d), taken on this stage's device:
        one id per row comes back, not a vocabulary of logits."""
        with self._torch.inference_mode():
            return greedy_ids(self.model.lm_head(hidden.to(self.device, self.dtype)))

    def guesses(self, heads: Any, hidden: Any, width: int) -> Any:
        """The draft heads' ``width`` best per head for hidden states (n, d), run on this
        stage's device (the heads are copied there once)."""
        if self._heads is None or self._heads[0] is not heads:
            self._heads = (heads, heads.to(self.device))
        on_device = self._heads[1]
        return on_device.vocab_guesses(hidden.to(self.device), self.model.lm_head, width).cpu()

    # ---- the cache -------------------------------------------------------------------------
    def commit(self, start: int, nodes: Sequence[int]) -> None:
        """Keep the first ``start`` cached tokens and then the tree ``nodes`` after them."""
        if list(nodes) != list(range(len(nodes))):
            self._move_down(start, [start + i for i in nodes])
        self.labels = self.labels[:start] + [self.labels[start + i] for i in nodes]

    def drop(self, slots: Sequence[int]) -> None:
        """Forget the cache entries ``slots``; the rest move down, in order."""
        if not slots:
            return
        keep = entries_kept(self, slots)
        first = next((i for i, k in enumerate(keep) if k != i), len(keep))
        if first < len(keep):
            self._move_down(first, keep[first:])
        self.labels = [self.labels[i] for i in keep]

    def _move_down(self, at: int, columns: Sequence[int]) -> None:
        """Columns ``columns`` (each at or after ``at``, ascending or a tree path) to ``at`` on."""
        torch = self._torch
        index = torch.tensor(list(columns), dtype=torch.long, device=self.device)
        with torch.inference_mode():
            for buffer in (*self._keys, *self._values):
                buffer[0, :, at : at + len(columns)] = buffer[0].index_select(1, index)

    def truncate(self, length: int) -> None:
        """Forget every token from ``length`` on (the mask reads only the columns kept)."""
        del self.labels[length:]

    def release(self) -> None:
        """Free the weights, the caches and the graphs now."""
        self.drop_graphs()
        self.model = None
        self._keys, self._values = [], []
        self._heads = None

    def drop_graphs(self) -> None:
        self._graphs.clear()
        self._pool = None

    # ---- one forward -----------------------------------------------------------------------
    def _run(self, x: Any, positions: Sequence[int], sees: np.ndarray) -> Any:
        """The new tokens ``x`` at rope ``positions``, written after the cache (whose labels
        already count them), each seeing the columns ``sees`` (n, length): the hidden
        states, on the wire's terms (float32 on the host) unless this is the last stage."""
        n, end = len(positions), self.length
        if end > self.n_ctx:
            del self.labels[end - n :]
            raise SequenceError(
                f"stage {self.start}-{self.stop}'s context of {self.n_ctx} tokens is full",
                hint="give a larger --ctx",
            )
        graphed = self.graphs_enabled and n <= GRAPH_WIDTH
        w = padded_width(n) if self.pad_widths and n <= GRAPH_WIDTH else n
        key = (w, span_for(end, self.n_ctx))
        columns = range(end - n, end)
        try:
            with self._torch.inference_mode():
                out = self._replay(key, x, positions, columns, sees) if graphed else None
                if out is None:
                    inputs = _Inputs(self, *key)
                    inputs.fill(x, list(positions), columns, sees, self.n_ctx)
                    out = self._forward(inputs)
                hidden = out[:, :n]
                return hidden.clone() if self.last else hidden.float().cpu()
        except RuntimeError as exc:
            raise ModelError(f"stage {self.start}-{self.stop} forward failed: {exc}") from exc

    def _replay(
        self, key: tuple[int, int], x: Any, positions: Sequence[int], columns: range, sees: np.ndarray
    ) -> Any:
        """The graph of shape ``key`` run on these inputs, captured first if new."""
        entry = self._graphs.get(key)
        if entry is None:
            inputs = _Inputs(self, *key, pinned=True)
            inputs.fill(x, list(positions), columns, sees, self.n_ctx)
            if self._pool is None:
                self._pool = self._torch.cuda.graph_pool_handle()
            graph, out = capture_graph(self._torch, self._pool, lambda: self._forward(inputs))
            self._graphs[key] = (graph, inputs, out)
            return out
        graph, inputs, out = entry
        inputs.fill(x, list(positions), columns, sees, self.n_ctx)
        graph.replay()
        return out

    def _forward(self, inputs: _Inputs) -> Any:
        """The decoder over ``inputs``: hidden states (1, w, d) in the model's dtype."""
        torch, w = self._torch, inputs.w
        positions, columns = inputs.ints[:w].view(1, w), inputs.ints[w:].view(1, w)
        mask = torch.zeros((1, 1, w, inputs.span), dtype=self.dtype, device=self.device)
        mask = mask.masked_fill(~inputs.sees[None, None], torch.finfo(self.dtype).min)
        return self._decoder.hidden_states(
            inputs.x, positions, columns, self._slot, mask, self._keys, self._values, slice(0, 1)
        )


def check_placement(kv: str, device: str, dtype: str | None = None) -> None:
    """Refuse a cache kind it does not know, and a dynamic-cache stage off the CPU or in
    another dtype than float32 (transformers' own layers, as ``Stage`` runs them)."""
    if kv not in KV_KINDS:
        raise ConfigError(f"unknown KV cache kind {kv!r}", hint=f"choose one of {', '.join(KV_KINDS)}")
    if kv == "dynamic" and device != "cpu":
        raise ConfigError(f"the dynamic-cache stage runs on the CPU, not {device!r}", hint="use --kv static")
    if kv == "dynamic" and dtype not in (None, "float32"):
        raise ConfigError(f"the dynamic-cache stage runs in float32, not {dtype}", hint="use --kv static")


def open_stage(
    folder: str | Path,
    start: int,
    stop: int,
    *,
    kv: str = "dynamic",
    device: str = "cpu",
    n_ctx: int = 4096,
    dtype: str | None = None,
) -> Stage | StaticStage:
    """Layers ``[start, stop)`` of the checkpoint in ``folder`` as a stage: on transformers'
    dynamic caches (``kv="dynamic"``, the CPU, float32) or on static ones (``"static"``, any
    device, in ``dtype``: by default float32 on the CPU and bfloat16 on a GPU; CUDA graphs
    on a GPU). Hidden states cross the wire as float32 either way."""
    check_placement(kv, device, dtype)
    if kv == "dynamic":
        return Stage.load(folder, start, stop)
    return StaticStage.load(folder, start, stop, device=device, dtype=dtype, n_ctx=n_ctx)
