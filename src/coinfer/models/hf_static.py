"""transformers on preallocated KV caches, each forward shape replayed as a CUDA graph.

On a GPU a small model's forward is launch-bound: hundreds of kernels of microseconds
each, queued one by one from Python. This backend removes the queueing, as gpt-fast and
vLLM do: the caches never change shape, so a forward of ``b`` sequences by ``w`` new
tokens is one fixed sequence of kernels, captured once as a CUDA graph and replayed.

- **Static caches.** Every layer has key and value buffers (slots, kv_heads, n_ctx + 1,
  head_dim), allocated at load. A sequence owns one slot; its tokens sit in columns
  0..len-1. Column n_ctx is scratch, where padding tokens of a batch write.
- **One forward for chains, trees and batches.** Its inputs are data: the token ids,
  their rope positions (``start + depth``), the column each one is written to
  (``start + i``), each row's ``start`` and a (w, w) block saying which new tokens each
  new token sees (its ancestors and itself; a chain is the causal block). The additive
  attention mask is built from those on the device, over the first ``span`` columns, a
  power of two that covers every row. So one graph serves every call of the same
  batch, width, span and first slot (rows in consecutive slots read the cache in place).
  On a GPU the widths are padded up to 1, 2, 4, 8, 16, 32, 64 or 80, and a batch whose
  slots leave gaps (a request finished) runs over slots 0..s, its gaps filled with empty
  rows, so that a model captures few shapes, and ``capture_shapes`` can take the likely
  ones at load instead of inside a timed run.
- **A decoder written for it** (``static_layers.StaticDecoder``): the model's own weights
  with its projections fused and, on a GPU, its elementwise steps compiled, so that a
  layer is about fifteen kernels.
- **Rows read back as needed.** Greedy verification reads back the argmax of each row
  (taken on the device); ``extend`` reads the logits; a prefill only its last row.

Truncating is free (the mask reads only columns below ``len``); keeping a tree path
moves its columns down; ``fork`` copies a slot. On CPU (tests, CI) the same forward runs
without graphs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from coinfer.errors import ModelError, SequenceError
from coinfer.models.base import Seq, backend_seq
from coinfer.models.hf import HFModel
from coinfer.models.hf_state import pack_layers, unpack_layers
from coinfer.models.static_graphs import GRAPH_WIDTH, MIN_SPAN, WIDTHS, capture_graph, padded_width, span_for
from coinfer.models.static_layers import (
    StaticDecoder,
    fused_layers_unsupported,
    fused_weights_unsupported,
    greedy_ids,
    top_choice,
)
from coinfer.models.tree import TokenTree
from coinfer.models.windows import layer_types

__all__ = ["ForwardRow", "HFStaticModel", "static_unsupported"]

_Key = tuple[int, int, int, "int | None"]  # batch, width, span, first slot when the slots are consecutive

_ARCHITECTURES = {"llama", "qwen2", "qwen3", "mistral"}  # decoders whose layers take position_embeddings
_PREFILL_CHUNK = 512  # the longest chain one forward takes; longer ones go in pieces
_FIRST_SLOTS = 8  # sequences a model's caches hold at first, unless it is loaded with a fixed number
_PAD_SLOTS_WIDTH = 16  # the widest forward whose gaps between slots are padded (see _placed)


def static_unsupported(model: Any) -> str | None:
    """Why ``model`` cannot run on static caches, or None when it can."""
    config = model.config
    if config.model_type not in _ARCHITECTURES:
        return f"architecture {config.model_type!r} (static caches cover {sorted(_ARCHITECTURES)})"
    kinds = set(layer_types(config))
    if len(kinds) > 1:
        return f"layer types {sorted(kinds)} (static caches need one kind of attention in every layer)"
    rope = (getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}).get(
        "rope_type", "default"
    )
    if "dynamic" in str(rope) or "longrope" in str(rope):
        return f"rope type {rope!r} (its tables change with the length)"
    return fused_layers_unsupported(config) or fused_weights_unsupported(model)


@dataclass(eq=False)
class StaticSeq(Seq):
    """A sequence and the slot of the static caches it owns."""

    slot: int = -1


@dataclass(frozen=True)
class ForwardRow:
    """One sequence's part of a forward: its slot, the tokens it holds before (``start``),
    the new ids, their depths (a chain's are 0..w-1) and which new tokens each new token
    sees (w, w) bool."""

    slot: int
    start: int
    ids: Sequence[int]
    depths: Sequence[int]
    sees: np.ndarray

    @classmethod
    def chain(cls, slot: int, start: int, ids: Sequence[int]) -> ForwardRow:
        n = len(ids)
        return cls(slot, start, ids, range(n), np.tril(np.ones((n, n), dtype=bool)))

    @classmethod
    def tree(cls, slot: int, start: int, tree: TokenTree) -> ForwardRow:
        return cls(slot, start, tree.tokens, tree.depths(), tree.attention_mask())


class _Inputs:
    """The packed int64 inputs of one (b, w) forward, on the host and on the device: one
    copy moves them all."""

    def __init__(self, torch: Any, b: int, w: int, device: Any, *, pinned: bool = False) -> None:
        """``pinned``: a graph's inputs, filled on every replay, sit in page-locked host
        memory (an asynchronous copy); a forward run once does not pay for allocating it."""
        self.b, self.w = b, w
        size = 3 * b * w + 2 * b + b * w * w
        self.host = torch.zeros(size, dtype=torch.long, pin_memory=pinned)
        self.device = torch.zeros(size, dtype=torch.long, device=device)

    def fill(self, rows: Sequence[ForwardRow], n_ctx: int, pad: int) -> None:
        b, w = self.b, self.w
        ids = np.full((b, w), pad, dtype=np.int64)
        positions = np.zeros((b, w), dtype=np.int64)
        columns = np.full((b, w), n_ctx, dtype=np.int64)
        sees = np.zeros((b, w, w), dtype=np.int64)
        sees[:] = np.tril(np.ones((w, w), dtype=np.int64))  # padding sees what a chain would
        for i, row in enumerate(rows):
            n = len(row.ids)
            ids[i, :n] = row.ids
            positions[i, :n] = [row.start + d for d in row.depths]
            positions[i, n:] = row.start + n
            # an empty row (a gap in a padded batch) may stand for another sequence's slot
            columns[i] = np.minimum(row.start + np.arange(w), n_ctx) if n else n_ctx
            sees[i, :n, :n] = row.sees
            sees[i, :n, n:] = 0
        meta = np.array([r.start for r in rows] + [r.slot for r in rows], dtype=np.int64)
        packed = np.concatenate([ids.ravel(), positions.ravel(), columns.ravel(), meta, sees.ravel()])
        self.host.numpy()[:] = packed
        self.device.copy_(self.host, non_blocking=True)

    def views(self) -> tuple[Any, Any, Any, Any, Any, Any]:
        b, w, d = self.b, self.w, self.device
        bw = b * w
        ids, positions, columns = d[:bw].view(b, w), d[bw : 2 * bw].view(b, w), d[2 * bw : 3 * bw].view(b, w)
        starts, slots = d[3 * bw : 3 * bw + b], d[3 * bw + b : 3 * bw + 2 * b]
        sees = d[3 * bw + 2 * b :].view(b, w, w).bool()
        return ids, positions, columns, starts, slots, sees


class HFStaticModel(HFModel):
    """An ``HFModel`` whose sequences live in static caches, its forwards CUDA graphs on a GPU."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        n_ctx: int | None = None,
        slots: int | None = None,
        graphs: bool | None = None,
        pad_widths: bool | None = None,
        pad_slots: bool | None = None,
    ) -> None:
        super().__init__(model, tokenizer, name=name, n_ctx=n_ctx)
        reason = static_unsupported(model)
        if reason is not None:
            raise ModelError(
                f"{name} cannot use static KV caches: {reason}", hint="load it with kv='dynamic'"
            )
        self.max_sequences = slots  # None: the slots double when they run out
        self.graphs_enabled = self.device.type == "cuda" if graphs is None else graphs
        # forwards padded to a few widths, so that few shapes are captured (default: with graphs)
        self.pad_widths = self.graphs_enabled if pad_widths is None else pad_widths
        # a batch with gaps between its slots run over slots 0..s (default: with graphs)
        self.pad_slots = self.graphs_enabled if pad_slots is None else pad_slots
        self.shapes: set[_Key] = set()  # every (batch, width, span, first slot) a forward ran at
        # forwards that ran over their slots' gaps (``pad_slots``), and the empty rows they ran
        self.gap_forwards = 0
        self.gap_rows = 0
        self._slots = slots or _FIRST_SLOTS
        self._free = list(range(self._slots))
        self._keys, self._values = self._allocate(self._slots)
        self._graphs: dict[_Key, tuple[Any, _Inputs, tuple[Any, Any]]] = {}
        self._pool: Any = None
        self._decoder = StaticDecoder(self._torch, self.model, fuse=self.graphs_enabled)
        self._pad = 0 if tokenizer.pad_token_id is None else int(tokenizer.pad_token_id)

    def _allocate(self, slots: int) -> tuple[list[Any], list[Any]]:
        torch, config = self._torch, self.model.config
        heads = config.num_key_value_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        shape = (slots, heads, self.n_ctx + 1, head_dim)
        with torch.inference_mode():
            keys = [
                torch.zeros(shape, dtype=self.model.dtype, device=self.device)
                for _ in self.model.model.layers
            ]
            values = [torch.zeros_like(k) for k in keys]
        return keys, values

    @property
    def graph_count(self) -> int:
        """How many forward shapes have been captured as CUDA graphs so far."""
        return len(self._graphs)

    # ---- sequences --------------------------------------------------------------------
    def _new_seq(self, seq_id: int) -> Seq:
        if not self._free and self.max_sequences is None:
            self._grow()
        if not self._free:
            raise SequenceError(
                f"{self.name}'s {self.max_sequences} KV cache slots are all in use: release a sequence first"
            )
        self._free.sort()
        return StaticSeq(seq_id, slot=self._free.pop(0))

    def _grow(self) -> None:
        """Twice the slots: new buffers that start with the old ones' contents. The graphs
        captured the old buffers' addresses, so each shape is captured again on next use."""
        old = self._slots
        keys, values = self._allocate(2 * old)
        with self._torch.inference_mode():
            for new, previous in zip((*keys, *values), (*self._keys, *self._values), strict=True):
                new[:old] = previous
        self._keys, self._values, self._slots = keys, values, 2 * old
        self.drop_graphs()
        self._free.extend(range(old, 2 * old))

    def _release(self, seq: Seq) -> None:
        self._free.append(_sseq(seq).slot)

    def _truncate(self, seq: Seq, length: int) -> None:
        """Nothing to free: a row's mask reads only the columns below its length."""

    def _fork(self, source: Seq, new: Seq) -> None:
        src, dst, n = _sseq(source).slot, _sseq(new).slot, len(source.tokens)
        with self._torch.inference_mode():
            for buffer in (*self._keys, *self._values):
                buffer[dst, :, :n] = buffer[src, :, :n]

    def _save_state(self, seq: Seq) -> bytes:
        slot, n = _sseq(seq).slot, len(seq.tokens)
        return pack_layers([k[slot, :, :n] for k in self._keys], [v[slot, :, :n] for v in self._values])

    def _restore(self, seq: Seq, data: bytes | bytearray) -> None:
        keys, values = unpack_layers(data, self.device, name=self.name)
        refused = ModelError(f"{self.name} cannot restore a saved cache of another model or shape")
        if len(keys) != len(self._keys) or any(k.shape[1] > self.n_ctx for k in keys):
            raise refused
        slot = _sseq(seq).slot  # a slot being restored into: released if this fails
        try:
            with self._torch.inference_mode():
                for buffer, saved in zip((*self._keys, *self._values), (*keys, *values), strict=True):
                    buffer[slot, :, : saved.shape[1]] = saved
        except RuntimeError as exc:
            raise refused from exc

    def _commit_path(self, seq: Seq, path: list[int]) -> None:
        """Move the kept nodes' columns down to follow the prefix, in path order."""
        start, slot = len(seq.tokens), _sseq(seq).slot
        if path == list(range(len(path))):
            return
        torch = self._torch
        index = torch.tensor([start + n for n in path], dtype=torch.long, device=self.device)
        with torch.inference_mode():
            for buffer in (*self._keys, *self._values):
                buffer[slot, :, start : start + len(path)] = buffer[slot].index_select(1, index)

    # ---- forward ----------------------------------------------------------------------
    def _extend(self, seq: Seq, ids: list[int], tree: TokenTree | None, last_only: bool) -> np.ndarray:
        slot, start = _sseq(seq).slot, len(seq.tokens)
        row = ForwardRow.chain(slot, start, ids) if tree is None else ForwardRow.tree(slot, start, tree)
        return self.forward_rows([row], "last" if last_only else "logits")[0]

    def _extend_greedy(self, seq: Seq, ids: list[int]) -> np.ndarray:
        return self.forward_rows([ForwardRow.chain(_sseq(seq).slot, len(seq.tokens), ids)], "argmax")[0]

    def _extend_greedy_tree(self, seq: Seq, ids: list[int], tree: TokenTree) -> np.ndarray:
        return self.forward_rows([ForwardRow.tree(_sseq(seq).slot, len(seq.tokens), tree)], "argmax")[0]

    def _extend_many(self, items: list[tuple[Seq, list[int]]], last_only: bool) -> list[np.ndarray]:
        rows = [ForwardRow.chain(_sseq(seq).slot, len(seq.tokens), ids) for seq, ids in items]
        return self.forward_rows(rows, "last" if last_only else "logits")

    def _extend_many_greedy(self, items: list[tuple[Seq, list[int]]]) -> np.ndarray:
        return np.array([int(c[-1]) for c in self._extend_many_choices(items)], dtype=np.int64)

    def _extend_many_choices(self, items: list[tuple[Seq, list[int]]]) -> list[np.ndarray]:
        rows = [ForwardRow.chain(_sseq(seq).slot, len(seq.tokens), ids) for seq, ids in items]
        return self.forward_rows(rows, "argmax")

    def _extend_many_next(
        self, items: list[tuple[Seq, list[int]]], want: list[bool]
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        rows = [ForwardRow.chain(_sseq(seq).slot, len(seq.tokens), ids) for seq, ids in items]
        out = list(zip(self.forward_rows(rows, "next", logits_for=want), want, strict=True))
        choices = np.array([int(np.argmax(o[-1])) if w else int(o[-1]) for o, w in out], dtype=np.int64)
        return choices, [o[-1] if w else None for o, w in out]

    def forward_rows(
        self, rows: Sequence[ForwardRow], read: str, *, logits_for: Sequence[bool] | None = None
    ) -> list[np.ndarray]:
        """One forward over ``rows``, chains longer than a prefill chunk in pieces.
        ``read``: "logits" (every new token's), "last" (each row's last), "argmax", or
        "next": each row's last logits (1, vocab) where ``logits_for`` asks, else its greedy
        choice alone (1,) (the others' logits stay on the device)."""
        if len(rows) > 1 and max(len(r.ids) for r in rows) > _PREFILL_CHUNK:  # long prompts: one by one
            asks = zip(rows, logits_for or [True] * len(rows), strict=True)
            return [self.forward_rows([row], read, logits_for=[w])[0] for row, w in asks]
        row = rows[0]
        if len(rows) > 1 or len(row.ids) <= _PREFILL_CHUNK or not _is_chain(row):
            return self._forward_once(rows, read, logits_for)
        parts = []
        for at in range(0, len(row.ids), _PREFILL_CHUNK):
            piece = ForwardRow.chain(row.slot, row.start + at, row.ids[at : at + _PREFILL_CHUNK])
            parts.append(self._forward_once([piece], read, logits_for)[0])
        return [parts[-1] if read in ("last", "next") else np.concatenate(parts)]

    def _forward_once(
        self, rows: Sequence[ForwardRow], read: str, logits_for: Sequence[bool] | None = None
    ) -> list[np.ndarray]:
        torch = self._torch
        w = max(len(r.ids) for r in rows)
        w = padded_width(w) if self.pad_widths else w
        span = span_for(max(r.start + len(r.ids) for r in rows), self.n_ctx)
        placed, order, first = _placed(rows, w, self.pad_slots)
        if len(placed) > len(rows):
            self.gap_forwards += 1
            self.gap_rows += len(placed) - len(rows)
        key = (len(placed), w, span, first)
        self.shapes.add(key)
        try:
            with torch.inference_mode():
                logits, choices = self._run(key, placed)
                if read == "next":
                    return self._read_next(rows, order, logits, choices, logits_for or [True] * len(rows))
                return self._read_back(rows, order, logits, choices, read)
        except RuntimeError as exc:
            raise ModelError(f"{self.name} forward failed: {exc}") from exc

    def capture_shapes(
        self,
        batches: Sequence[int] = (1,),
        widths: Sequence[int] = WIDTHS,
        spans: Sequence[int] = (MIN_SPAN,),
    ) -> int:
        """Capture the graphs of every (batch, width, span) given, over slots 0..batch-1,
        before they are needed (a capture costs tens of forwards); returns how many were
        new. Nothing to do without graphs. ``batches`` past the slots are left out.
        With a batch of 2 or more, the gathered forward (slots out of order) is compiled
        too: its cache reads are laid out otherwise, so it is compiled apart, seconds that
        a batch engine's first such prefill would otherwise pay."""
        if not self.graphs_enabled:
            return 0
        before = len(self._graphs)
        batches = [b for b in batches if b <= self._slots]
        padded = {padded_width(w) if self.pad_widths else w for w in widths if w <= GRAPH_WIDTH}
        keys = product(batches, sorted(padded), sorted({span_for(s, self.n_ctx) for s in spans}), [0])
        with self._torch.inference_mode():
            for key in (k for k in keys if k not in self._graphs):
                self._capture(key, [ForwardRow.chain(s, 0, []) for s in range(key[0])])
            if max(batches, default=1) >= 2:
                self._compile_gathered()
        return len(self._graphs) - before

    def _compile_gathered(self) -> None:
        """Run the gathered forward once for one token and for a prompt's width (each
        compiled apart), over two empty rows in reversed slots: nothing is written."""
        rows = [ForwardRow.chain(1, 0, []), ForwardRow.chain(0, 0, [])]
        for w in (1, GRAPH_WIDTH + 1):
            inputs = _Inputs(self._torch, 2, w, self.device)
            inputs.fill(rows, self.n_ctx, self._pad)
            self._forward(inputs, (2, w, MIN_SPAN, None))

    def _run(self, key: _Key, rows: Sequence[ForwardRow]) -> tuple[Any, Any]:
        """The forward of shape ``key`` on ``rows``: a graph replay where graphs are on."""
        if not self.graphs_enabled or key[1] > GRAPH_WIDTH:
            inputs = _Inputs(self._torch, key[0], key[1], self.device)
            inputs.fill(rows, self.n_ctx, self._pad)
            return self._forward(inputs, key, choose=False)
        entry = self._graphs.get(key)
        if entry is None:
            return self._capture(key, rows)
        graph, inputs, outputs = entry
        inputs.fill(rows, self.n_ctx, self._pad)
        graph.replay()
        return outputs

    def _capture(self, key: _Key, rows: Sequence[ForwardRow]) -> tuple[Any, Any]:
        """Capture the shape with the real inputs (a forward only rewrites the same columns
        with the same values, so its warm-up changes nothing) into the pool that every
        graph of this model shares."""
        torch = self._torch
        inputs = _Inputs(torch, key[0], key[1], self.device, pinned=True)
        inputs.fill(rows, self.n_ctx, self._pad)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph, outputs = capture_graph(torch, self._pool, lambda: self._forward(inputs, key))
        self._graphs[key] = (graph, inputs, outputs)
        return outputs

    def _forward(self, inputs: _Inputs, key: _Key, *, choose: bool = True) -> tuple[Any, Any]:
        """The forward over the packed inputs: logits (b, w, vocab) and, with ``choose``
        (inside a graph, which cannot take it later), their argmax (b, w), else None."""
        ids, positions, columns, starts, slots, sees = inputs.views()
        span, first = key[2], key[3]
        mask = self._mask(starts, positions, sees, span)
        rows = None if first is None else slice(first, first + key[0])
        decoder = self._decoder
        logits = decoder.head(
            decoder.hidden_states(ids, positions, columns, slots, mask, self._keys, self._values, rows)
        )
        return logits, top_choice(logits) if choose else None

    def _mask(self, starts: Any, positions: Any, sees: Any, span: int) -> Any:
        """Additive mask (b, 1, w, span): row i's token q sees every column below its start,
        and column ``start + c`` where ``sees[i, q, c]``; under a sliding window, only
        those fewer than ``window`` positions back."""
        torch, dtype = self._torch, self.model.dtype
        b, w = sees.shape[0], sees.shape[1]
        columns = torch.arange(span, device=self.device)[None, :]
        rel = columns - starts[:, None]  # (b, span)
        new = rel.clamp(0, w - 1)  # the new token a column holds, where it holds one
        block = sees.gather(2, new[:, None, :].expand(b, w, span))
        allowed = (rel < 0)[:, None, :] | (((rel >= 0) & (rel < w))[:, None, :] & block)
        if self._window is not None:
            # a cached column holds the token at its own position, a new one its row's
            at = torch.where(rel < 0, columns, positions.gather(1, new))
            allowed &= positions[:, :, None] - at[:, None, :] < self._window
        mask = torch.zeros((b, 1, w, span), dtype=dtype, device=self.device)
        return mask.masked_fill(~allowed[:, None], torch.finfo(dtype).min)

    def _read_back(
        self, rows: Sequence[ForwardRow], order: list[int], logits: Any, choices: Any, read: str
    ) -> list[np.ndarray]:
        """Each row's results; ``order``: where each row ran in the forward."""
        counts = [len(r.ids) for r in rows]
        if read == "argmax":
            picked = greedy_ids(logits) if choices is None else choices.cpu().numpy()
            return [picked[i, :n] for i, n in zip(order, counts, strict=True)]
        if read == "last":
            torch = self._torch
            index = torch.tensor([n - 1 for n in counts], device=self.device)
            last = logits[torch.tensor(order, device=self.device), index]
            return list(last.float().cpu().numpy()[:, None, :])
        return [logits[i, :n].float().cpu().numpy() for i, n in zip(order, counts, strict=True)]

    def _read_next(
        self, rows: Sequence[ForwardRow], order: list[int], logits: Any, choices: Any, want: Sequence[bool]
    ) -> list[np.ndarray]:
        """Each row's last logits (1, vocab) where ``want``, else its greedy choice (1,):
        only the rows that sample move a vocabulary off the device."""
        torch = self._torch
        at = torch.tensor(order, device=self.device)
        index = torch.tensor([len(r.ids) - 1 for r in rows], device=self.device)
        keep = torch.tensor([i for i, w in enumerate(want) if w], dtype=torch.long, device=self.device)
        rest = torch.tensor([i for i, w in enumerate(want) if not w], dtype=torch.long, device=self.device)
        lasts = logits[at[keep], index[keep]].float().cpu().numpy()
        if choices is not None:
            picked = choices[at[rest], index[rest]].cpu().numpy()
        else:
            picked = greedy_ids(logits[at[rest], index[rest]])
        got, chosen = iter(lasts), iter(picked)
        return [next(got)[None] if w else np.array([next(chosen)], dtype=np.int64) for w in want]

    def drop_graphs(self) -> None:
        """Free every captured graph and their memory pool; each shape is captured again
        on next use. (A pool whose graphs are all gone cannot take new ones: PyTorch
        asserts, so the pool goes with them.)"""
        self._graphs.clear()
        self._pool = None

    def close(self) -> None:
        super().close()
        self.drop_graphs()
        self._keys, self._values = [], []


def _sseq(seq: Seq) -> StaticSeq:
    return backend_seq(seq, StaticSeq)


def _placed(rows: Sequence[ForwardRow], w: int, pad: bool) -> tuple[list[ForwardRow], list[int], int | None]:
    """The rows as the forward runs them, where each row ran, and the first slot when the
    slots are consecutive (the cache is then read in place; None: gathered). With ``pad``,
    forwards of up to 16 tokens whose highest slot s is below 4 or twice their rows run
    over slots 0..s, the gaps as empty rows, which write only the scratch column: a batch
    engine whose requests finish one by one keeps its few shapes (the cost is nearly flat
    in rows there)."""
    slots = [r.slot for r in rows]
    top = max(slots) + 1
    if pad and w <= _PAD_SLOTS_WIDTH and len(set(slots)) == len(slots) and top <= max(2 * len(rows), 4):
        by_slot = {r.slot: r for r in rows}
        placed = [by_slot.get(s) or ForwardRow.chain(s, 0, []) for s in range(top)]
        return placed, slots, 0
    first = slots[0] if slots == list(range(slots[0], slots[0] + len(rows))) else None
    return list(rows), list(range(len(rows))), first


def _is_chain(row: ForwardRow) -> bool:
    return list(row.depths) == list(range(len(row.ids)))
