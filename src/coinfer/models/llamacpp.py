"""llama.cpp backend through llama-cpp-python's low-level batch API.

All sequences share one context with a *unified* KV cache: a ``Seq`` owns one llama seq_id.
A token tree is decoded in one ``llama_decode``: every leaf gets a temporary seq_id that
first shares the sequence's cells (``memory_seq_cp``), and each tree token carries the
seq_ids of the leaves below it, so it attends exactly to the prefix and its ancestors;
positions are ``len(seq) + depth``. ``commit_path`` copies the kept path to the sequence's
own seq_id and drops the temporaries; ``truncate`` is ``memory_seq_rm``, ``fork`` is
``memory_seq_cp`` of every cell (shared, not copied; with a cache per sequence, copied).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partialmethod
from pathlib import Path
from typing import Any

import numpy as np

from coinfer import catalog
from coinfer.errors import ConfigError, ContextOverflowError, MissingDependencyError, ModelError
from coinfer.models.base import CheckedForward, Seq, SteerableModel, TokenConstraint, backend_seq
from coinfer.models.chat_template import ChatTemplate
from coinfer.models.gguf_layout import read_tensor_table
from coinfer.models.llamacpp_hooks import layer_progress_callback, route_logs
from coinfer.models.llamacpp_split import FreeStreams, equal_groups, split_passes
from coinfer.models.llamacpp_state import copy_in, copy_out
from coinfer.models.llamacpp_tiled import TILED_MIN_ROWS, TILED_MIN_ROWS_ENV, resume_rows
from coinfer.models.tree import TokenTree

__all__ = ["LlamaCppModel"]

log = logging.getLogger(__name__)


def _import_llama() -> Any:
    os.environ.setdefault(TILED_MIN_ROWS_ENV, str(TILED_MIN_ROWS))  # read at llama.cpp's first matmul
    try:
        import llama_cpp
        import llama_cpp._internals  # noqa: F401  (LlamaModel/LlamaContext wrappers)
    except ImportError as exc:
        raise MissingDependencyError("llama-cpp-python", "llama") from exc
    route_logs(llama_cpp)
    return llama_cpp


_PROBE = """
import sys, llama_cpp, llama_cpp._internals as I
quiet = llama_cpp.llama_log_callback(lambda *a: None)  # kept referenced: llama.cpp calls it
llama_cpp.llama_log_set(quiet, None)
m = I.LlamaModel(path_model=sys.argv[1], params=llama_cpp.llama_model_default_params(), verbose=False)
p = llama_cpp.llama_context_default_params(); p.n_ctx = 64; p.n_batch = p.n_ubatch = 8
c = I.LlamaContext(model=m, params=p, verbose=False)
b = I.LlamaBatch(n_tokens=8, embd=0, n_seq_max=1)
b.set_batch([0, 1, 2, 3], 0, False); c.decode(b)  # a batch (matrix kernels)
b.set_batch([4], 4, False); c.decode(b)  # one token (vector kernels)
"""


def cpu_extra_buffers_work(path: Path) -> bool:
    """Whether llama.cpp's extra CPU buffer types (weight repacking, AMX) survive a decode.

    Some builds crash in their AMX kernels on machines that report AMX without granting
    it. A crash cannot be caught, so a child process decodes a few tokens once per
    llama.cpp build and model, and the answer is cached. ``COINFER_LLAMA_EXTRA_BUFFERS``
    (0 or 1) overrides the check.
    """
    if (env := os.environ.get("COINFER_LLAMA_EXTRA_BUFFERS")) in ("0", "1"):
        return env == "1"
    import llama_cpp

    lib = Path(llama_cpp.__file__).parent / "lib"
    build = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(lib.glob("libggml-cpu*"))]
    st = path.stat()
    ident = repr((llama_cpp.__version__, build, str(path), st.st_size, st.st_mtime_ns))
    record = (
        catalog.cache_dir()
        / "probes"
        / f"llama-extra-buffers-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"
    )
    if record.exists():
        return record.read_text().strip() == "ok"
    proc = subprocess.run([sys.executable, "-c", _PROBE, str(path)], capture_output=True, timeout=300)
    if proc.returncode > 0:  # an ordinary error (a bad file…): the real load will report it
        return True
    ok = proc.returncode == 0  # negative: killed by a signal, i.e. the kernels crashed
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text("ok" if ok else f"crashed: signal {-proc.returncode}")
    if not ok:
        log.warning(
            "this llama.cpp build crashes in its extra CPU kernels (AMX) on this machine; running "
            "without them, which is several times slower (rebuild llama-cpp-python with "
            "scripts/build-llama-wheel.sh, AMX off)"
        )
    return ok


@dataclass(eq=False)
class LlamaSeq(Seq):
    """A sequence's llama.cpp seq_id, and for a pending tree the leaf slot under each node."""

    llama_id: int = -1
    leaf_of: list[int] = field(default_factory=list)


class LlamaCppModel(SteerableModel):
    """A GGUF model in one llama.cpp context shared by all its sequences.

    ``kv_unified`` (the default) puts all sequences in one cache of ``n_ctx`` cells, which
    token trees need; otherwise each of the ``n_seq_max`` sequences gets its own ``n_ctx``
    cells, which is what many long conversations decoded together want (each token then
    attends only over its own sequence). But then llama.cpp splits every batch into
    micro-batches of equally many tokens from consecutive sequence ids: a batch of several
    sequences with different token counts, or with ids that are not consecutive, runs as
    several forwards. Batches of speculative drafts want the unified cache.

    ``hidden_states`` keeps, next to each forward's logits, the final-norm hidden state of
    the same rows (``last_hidden``: what draft heads read).

    ``layer_progress`` has every forward report each layer it finishes to the model's
    ``layer_listener`` (llama.cpp's eval callback; a weights prefetcher follows it).
    """

    backend = "llama.cpp"
    kv_cells_shared = True
    # its CPU kernels run a forward's rows in blocks of 4, and fewer than 8 rows on others:
    # a tail of another length read otherwise than the whole prompt (Qwen2.5-Coder-0.5B);
    # a model with K-quant weights raises ``min_tail`` to the tiled kernel's (``resume_rows``)
    prefix_block, min_tail = 4, 8

    def __init__(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        n_seq_max: int = 64,
        n_batch: int = 512,
        n_gpu_layers: int | None = None,
        extra_buffers: bool | None = None,
        flash_attn: bool = False,
        kv_unified: bool = True,
        use_mmap: bool | None = None,
        layer_progress: bool = False,
        hidden_states: bool = False,
    ) -> None:
        super().__init__()
        lc = _import_llama()
        self._lc = lc
        path = Path(path)
        if not path.is_file():
            raise ModelError(f"no model file at {path}", hint="pass an existing .gguf file")
        tensors = read_tensor_table(path)  # a damaged header is refused here, not met inside llama.cpp
        self.name = name or path.name
        self.path = path
        self.min_tail = resume_rows((t.kind for t in tensors), type(self).min_tail)
        self.extra_buffers = cpu_extra_buffers_work(path) if extra_buffers is None else extra_buffers
        self._model = self._load(path, n_gpu_layers, use_mmap)
        # memory-mapped weights are paged in from the file (and out under memory pressure)
        self.weights_file = path if use_mmap else None
        self.n_ctx = min(n_ctx, self._model.n_ctx_train()) if n_ctx > 0 else self._model.n_ctx_train()
        self._n_batch, self._n_seq_max = n_batch, n_seq_max
        self.kv_unified = self.kv_cells_shared = kv_unified
        self.max_sequences = n_seq_max
        n_cells = self.n_ctx if kv_unified else self.n_ctx * n_seq_max  # n_ctx: each sequence's window
        self._threads = n_threads or os.cpu_count() or 1
        self._keep_hidden_states(hidden_states)
        cparams = self._context_params(self._threads, flash_attn, n_cells)
        if layer_progress:
            self._layer_cb = layer_progress_callback(lc, weakref.ref(self))
            cparams.cb_eval = self._layer_cb
        try:
            self._ctx = lc._internals.LlamaContext(model=self._model, params=cparams, verbose=False)
        except ValueError as exc:
            raise ModelError(f"llama.cpp could not create a context for {path}: {exc}") from exc
        self._mem = self._ctx.memory
        self._batch = lc._internals.LlamaBatch(n_tokens=n_batch, embd=0, n_seq_max=n_seq_max)
        self.vocab_size = self._model.n_vocab()
        self._free_ids, self._parking = FreeStreams(n_seq_max, self.name), False  # parking: the highest
        self._tree_ids: dict[int, list[int]] = {}  # seq id -> temporary leaf seq ids
        self.metadata = self._model.metadata()
        self.eos_ids = frozenset(
            t for t in range(self.vocab_size) if lc.llama_vocab_is_eog(self._model.vocab, t)
        )
        self.template = self._read_template()
        self._grammars: dict[str, str] = {}  # JSON schema -> GBNF

    def set_threads(self, n: int) -> int | None:
        if n < 1:
            raise ConfigError(f"threads must be at least 1, got {n}")
        previous, self._threads = self._threads, n
        self._lc.llama_set_n_threads(self._ctx.ctx, n, n)
        return previous

    def _load(self, path: Path, n_gpu_layers: int | None, use_mmap: bool | None) -> Any:
        """``use_mmap``: True maps the file (pages read on demand, dropped under memory
        pressure), False reads the weights into resident memory, None lets llama.cpp choose."""
        params = self._lc.llama_model_default_params()
        if use_mmap is not None:
            params.load_mode = self._lc.LLAMA_LOAD_MODE_MMAP if use_mmap else self._lc.LLAMA_LOAD_MODE_NONE
        if n_gpu_layers is None:
            n_gpu_layers = -1 if self._lc.llama_supports_gpu_offload() else 0
        params.n_gpu_layers = n_gpu_layers
        params.use_extra_bufts = self.extra_buffers
        try:
            return self._lc._internals.LlamaModel(path_model=str(path), params=params, verbose=False)
        except ValueError as exc:
            raise ModelError(
                f"llama.cpp could not load {path}: {exc}",
                hint="check that the file is a complete GGUF model (coinfer models info NAME)",
            ) from exc

    def _keep_hidden_states(self, on: bool) -> None:
        self.hidden_states = on
        self.n_embd = self._model.n_embd()
        self._hidden = np.empty((0, self.n_embd), dtype=np.float32)

    def _context_params(self, threads: int, flash_attn: bool, n_cells: int) -> Any:
        params = self._lc.llama_context_default_params()
        if self.hidden_states:  # each output row's final-norm state, next to its logits
            params.embeddings = True
            params.pooling_type = self._lc.LLAMA_POOLING_TYPE_NONE
        params.n_ctx = n_cells
        params.n_batch = params.n_ubatch = self._n_batch
        params.n_seq_max = self._n_seq_max
        params.n_threads = params.n_threads_batch = threads
        # Unified: one cell may belong to several sequences (token trees), but every token
        # attends over the cells of all sequences (masked). Not unified: each sequence has
        # its own n_ctx cells, so many long conversations decode together cheaply.
        params.kv_unified = self.kv_unified
        params.swa_full = True  # sliding-window models keep full caches so rollback works
        params.no_perf = True
        # Flash attention on the CPU accumulates in f16: it moved SmolLM2's logits up to 2.1
        # away from the fp32 reference (0.8 more than without it), flipping greedy tokens.
        params.flash_attn_type = 1 if flash_attn else 0
        return params

    # ---- tokens -----------------------------------------------------------------------
    def _read_template(self) -> ChatTemplate:
        bos = self._model.token_bos()
        eos = self._model.token_eos()
        return ChatTemplate(
            source=self.metadata.get("tokenizer.chat_template"),
            bos_token=self._piece(bos).decode("utf-8", "replace") if bos >= 0 else "",
            eos_token=self._piece(eos).decode("utf-8", "replace") if eos >= 0 else "",
            bos_id=bos if bos >= 0 else None,
            add_bos=bool(self._model.add_bos_token()) and bos >= 0,
        )

    def tokenize(self, text: str, *, special: bool = False, add_bos: bool = False) -> list[int]:
        return list(self._model.tokenize(text.encode("utf-8"), add_bos, special))

    def _piece(self, token: int) -> bytes:
        size = 64
        while True:
            buf = ctypes.create_string_buffer(size)
            n = self._lc.llama_token_to_piece(self._model.vocab, token, buf, size, 0, True)
            if n >= 0:
                return buf.raw[:n]
            size = -n

    def detokenize(self, ids: Sequence[int]) -> str:
        return b"".join(self._piece(int(t)) for t in ids).decode("utf-8", errors="replace")

    # ---- sequences --------------------------------------------------------------------
    def json_constraint(self, schema: Mapping[str, Any]) -> TokenConstraint:
        """llama.cpp's grammar sampler over the GBNF of ``schema`` (see ``llamacpp_grammar``)."""
        from coinfer.models.llamacpp_grammar import GrammarConstraint, schema_grammar

        key = json.dumps(dict(schema), sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = schema_grammar(schema)
        return GrammarConstraint(self._lc, self._model.vocab, self._grammars[key], self.vocab_size)

    def _moved(self, seq: Seq, *, high: bool) -> Seq:
        """With a cache per sequence, ``seq`` moved (``save_state``, ``restore``) to the highest
        free stream above its own (``high``) or the lowest below it: one pass runs only
        consecutive streams (``llamacpp_split``)."""
        own, free = backend_seq(seq, LlamaSeq).llama_id, self._free_ids
        if self.kv_unified or not (free.above(own) if high else free.below(own)):
            return seq
        if seq.pending is not None or (state := self.save_state(seq)) is None:
            return seq  # a token tree's leaves hold streams of their own: it stays
        self._parking = high
        try:
            moved = self.restore(state)
        finally:
            self._parking = False
        self.release(seq)
        return moved

    park, pack = partialmethod(_moved, high=True), partialmethod(_moved, high=False)

    def batch_order(self, seq: Seq) -> int:
        return backend_seq(seq, LlamaSeq).llama_id if not self.kv_unified else seq.id

    def pass_rows(self, items: Sequence[tuple[Seq, int]]) -> list[int]:
        if self.kv_unified:
            return super().pass_rows(items)
        return split_passes([(self.batch_order(seq), n) for seq, n in items])

    def _new_seq(self, seq_id: int) -> Seq:
        return LlamaSeq(seq_id, llama_id=self._free_ids.take(high=self._parking))

    def _release(self, seq: Seq) -> None:
        seq = backend_seq(seq, LlamaSeq)
        self._drop_tree(seq)
        lid = seq.llama_id
        self._lc.llama_memory_seq_rm(self._mem, lid, -1, -1)
        self._free_ids.give(lid)

    def _truncate(self, seq: Seq, length: int) -> None:
        seq = backend_seq(seq, LlamaSeq)
        self._drop_tree(seq)
        if not self._lc.llama_memory_seq_rm(self._mem, seq.llama_id, length, -1):
            raise ModelError(f"llama.cpp could not roll {self.name} back to {length} tokens")

    def _drop_tree(self, seq: LlamaSeq) -> None:
        for tid in self._tree_ids.pop(seq.id, []):
            self._lc.llama_memory_seq_rm(self._mem, tid, -1, -1)
            self._free_ids.give(tid)

    def _fork(self, source: Seq, new: Seq) -> None:
        src, dst = backend_seq(source, LlamaSeq), backend_seq(new, LlamaSeq)
        if not self.kv_unified:  # seq_cp across streams copies at the next decode; a move read old cells
            return self._restore(new, self._save_state(source))
        self._lc.llama_memory_seq_cp(self._mem, src.llama_id, dst.llama_id, -1, -1)

    def _save_state(self, seq: Seq) -> bytearray:
        return copy_out(self._lc, self._ctx.ctx, backend_seq(seq, LlamaSeq).llama_id, self.name)

    def _restore(self, seq: Seq, data: bytes | bytearray) -> None:
        copy_in(self._lc, self._ctx.ctx, backend_seq(seq, LlamaSeq).llama_id, data, self.name)

    def _commit_path(self, seq: Seq, path: list[int]) -> None:
        seq = backend_seq(seq, LlamaSeq)
        leaves = self._tree_ids[seq.id]
        if path:
            start = len(seq.tokens)
            leaf = seq.leaf_of[path[-1]]
            self._lc.llama_memory_seq_cp(
                self._mem,
                leaves[leaf],
                seq.llama_id,
                start,
                start + len(path),
            )
        self._drop_tree(seq)

    # ---- forward ----------------------------------------------------------------------
    def _extend(self, seq: Seq, ids: list[int], tree: TokenTree | None, last_only: bool) -> np.ndarray:
        if tree is None:
            return self._decode(self._chain_rows(seq, ids), outputs=[len(ids) - 1] if last_only else None)
        return self._decode_tree(seq, ids, tree, greedy=False)

    def _extend_greedy_tree(self, seq: Seq, ids: list[int], tree: TokenTree) -> np.ndarray:
        return self._decode_tree(seq, ids, tree, greedy=True)

    def _decode_tree(self, seq: Seq, ids: list[int], tree: TokenTree, *, greedy: bool) -> np.ndarray:
        """A token tree appended to ``seq``: logits per node, or with ``greedy`` each node's
        argmax, taken on llama.cpp's buffer."""
        rows = self._tree_rows(seq, ids, tree)
        try:
            return self._decode(rows, greedy=greedy)
        except BaseException:
            self._drop_tree(backend_seq(seq, LlamaSeq))
            raise

    def _tree_rows(self, seq: Seq, ids: list[int], tree: TokenTree) -> list[tuple[int, int, tuple[int, ...]]]:
        """A token tree's rows: each leaf's path in a sequence of its own (copies of
        ``seq``'s cache, taken here), each node decoded once into every leaf's below it."""
        seq = backend_seq(seq, LlamaSeq)
        start = len(seq.tokens)
        if not self.kv_unified:
            raise ModelError(
                "token trees need a unified KV cache",
                hint="load the model with kv_unified=True (the default)",
            )
        depths = tree.depths()
        leaf_sets = tree.leaves_below()
        leaves = sorted({leaf for s in leaf_sets for leaf in s})
        if len(leaves) > len(self._free_ids):
            raise ModelError(
                f"a tree with {len(leaves)} leaves needs more free sequence slots than the "
                f"{len(self._free_ids)} left",
                hint="load the model with a larger n_seq_max or draft a narrower tree",
            )
        tids = [self._free_ids.take() for _ in leaves]
        self._tree_ids[seq.id] = tids
        slot = {leaf: i for i, leaf in enumerate(leaves)}
        for tid in tids:
            self._lc.llama_memory_seq_cp(self._mem, seq.llama_id, tid, -1, -1)
        seq.leaf_of = [slot[min(s)] for s in leaf_sets]
        return [
            (t, start + d, tuple(tids[slot[leaf]] for leaf in sorted(leaf_set)))
            for t, d, leaf_set in zip(ids, depths, leaf_sets, strict=True)
        ]

    def _extend_batch(self, forwards: list[CheckedForward]) -> list[np.ndarray]:
        """Every forward's rows in one batch (decoded in chunks of n_batch): chains and
        trees of several sequences verified in one pass. With hidden states kept, one
        forward after another (``last_hidden`` is the last forward's)."""
        if self.hidden_states or len(forwards) < 2:
            return super()._extend_batch(forwards)
        rows: list[tuple[int, int, tuple[int, ...]]] = []
        outputs: list[int] = []
        for f in forwards:
            at = len(rows)
            tree, seq = f.tree, f.seq
            rows.extend(self._chain_rows(seq, f.ids) if tree is None else self._tree_rows(seq, f.ids, tree))
            outputs.extend(range(len(rows) - 1, len(rows)) if f.last_only else range(at, len(rows)))
        greedy = all(f.greedy for f in forwards)
        out = self._decode(rows, outputs=outputs, greedy=greedy)
        results, at = [], 0
        for f in forwards:
            n = 1 if f.last_only else len(f.ids)
            part = out[at : at + n]
            results.append(np.argmax(part, axis=-1) if f.greedy and not greedy else part)
            at += n
        return results

    def _extend_greedy(self, seq: Seq, ids: list[int]) -> np.ndarray:
        return self._decode(self._chain_rows(seq, ids), greedy=True)

    def _chain_rows(self, seq: Seq, ids: list[int]) -> list[tuple[int, int, tuple[int, ...]]]:
        """``ids`` as (token, position, seq_ids) rows appended to ``seq``'s cache."""
        start, lid = len(seq.tokens), backend_seq(seq, LlamaSeq).llama_id
        return [(t, start + i, (lid,)) for i, t in enumerate(ids)]

    def _extend_many_greedy(self, items: list[tuple[Seq, list[int]]]) -> np.ndarray:
        rows, ends = self._many_rows(items)
        return self._decode(rows, outputs=ends, greedy=True)

    def _extend_many_choices(self, items: list[tuple[Seq, list[int]]]) -> list[np.ndarray]:
        rows, ends = self._many_rows(items)
        choices = self._decode(rows, greedy=True)
        return [choices[end + 1 - len(ids) : end + 1] for (_, ids), end in zip(items, ends, strict=True)]

    def _many_rows(
        self, items: list[tuple[Seq, list[int]]]
    ) -> tuple[list[tuple[int, int, tuple[int, ...]]], list[int]]:
        """Every item's chain as rows of one batch, and the index of each item's last row."""
        rows: list[tuple[int, int, tuple[int, ...]]] = []
        ends: list[int] = []
        for seq, ids in items:
            rows.extend(self._chain_rows(seq, ids))
            ends.append(len(rows) - 1)
        return rows, ends

    def _extend_many(self, items: list[tuple[Seq, list[int]]], last_only: bool) -> list[np.ndarray]:
        rows, ends = self._many_rows(items)
        if last_only:
            logits = self._decode(rows, outputs=ends)
            return [logits[i : i + 1] for i in range(len(items))]
        logits = self._decode(rows)
        out, at = [], 0
        for _, ids in items:
            out.append(logits[at : at + len(ids)])
            at += len(ids)
        return out

    def _decode(
        self,
        rows: list[tuple[int, int, tuple[int, ...]]],
        *,
        outputs: list[int] | None = None,
        greedy: bool = False,
    ) -> np.ndarray:
        """Decode (token, position, seq_ids) rows in chunks of n_batch.

        Logits (len(rows), vocab), or one row per index of ``outputs`` (ascending); with
        ``greedy``, only each output row's argmax (int64), taken on llama.cpp's own
        logits buffer. With hidden states, llama.cpp outputs every row of a batch while it
        extracts them, so the rows before the first output go first without (a prompt's
        rows would otherwise each pay for the output projection).
        """
        wanted = list(range(len(rows))) if outputs is None else list(outputs)
        if not self.hidden_states:
            groups = [list(range(len(rows)))] if self.kv_unified else equal_groups(rows)
            if len(groups) > 1:
                return self._decode_groups(rows, wanted, groups, greedy)
            return self._decode_rows(rows, wanted, hidden=False, greedy=greedy)
        first = wanted[0] if wanted else len(rows)
        if first:
            self._decode_rows(rows[:first], [], hidden=False)
        logits = self._decode_rows(rows[first:], [w - first for w in wanted], hidden=True)
        return np.argmax(logits, axis=-1) if greedy else logits

    def _decode_groups(
        self, rows: list[tuple[int, int, tuple[int, ...]]], wanted: list[int], groups: list[list[int]],
        greedy: bool,
    ) -> np.ndarray:  # fmt: skip
        """``_decode_rows`` of each group in turn, the wanted rows' results put back in order."""
        shape = (len(wanted),) if greedy else (len(wanted), self.vocab_size)
        out = np.empty(shape, dtype=np.int64 if greedy else np.float32)
        slot = {row: k for k, row in enumerate(wanted)}
        for group in groups:
            marks = [(k, i) for k, i in enumerate(group) if i in slot]
            chunk = [rows[i] for i in group]
            part = self._decode_rows(chunk, [k for k, _ in marks], hidden=False, greedy=greedy)
            for j, (_, i) in enumerate(marks):
                out[slot[i]] = part[j]
        return out

    def _decode_rows(
        self,
        rows: list[tuple[int, int, tuple[int, ...]]],
        wanted: list[int],
        *,
        hidden: bool,
        greedy: bool = False,
    ) -> np.ndarray:
        shape = (len(wanted),) if greedy else (len(wanted), self.vocab_size)
        out = np.empty(shape, dtype=np.int64 if greedy else np.float32)
        if self.hidden_states:
            self._lc.llama_set_embeddings(self._ctx.ctx, hidden)
            if hidden:
                self._hidden = np.empty((len(wanted), self.n_embd), dtype=np.float32)
        done = 0
        for lo in range(0, len(rows), self._n_batch):
            chunk = rows[lo : lo + self._n_batch]
            marks: list[int] = []
            while done + len(marks) < len(wanted) and wanted[done + len(marks)] < lo + len(chunk):
                marks.append(wanted[done + len(marks)] - lo)
            self._fill_batch(chunk, marks)
            t0 = time.perf_counter()
            rc = self._lc.llama_decode(self._ctx.ctx, self._batch.batch)
            t1 = time.perf_counter()
            self.clock.compute_s += t1 - t0
            self._check_decoded(rc)
            if hidden:
                self._read_rows(marks, out[done : done + len(marks)], self._hidden[done : done + len(marks)])
            elif marks:  # llama.cpp packs the marked rows' logits in order: a view, not a copy
                view = np.ctypeslib.as_array(
                    self._lc.llama_get_logits(self._ctx.ctx), shape=(len(marks), self.vocab_size)
                )
                out[done : done + len(marks)] = np.argmax(view, axis=-1) if greedy else view
            self.clock.logits_s += time.perf_counter() - t1
            done += len(marks)
        return out

    def _check_decoded(self, rc: int) -> None:
        if rc == 1:
            cells = "shared by all sequences" if self.kv_unified else "per sequence"
            raise ContextOverflowError(
                f"the KV cache of {self.name} ({self.n_ctx} cells {cells}) is full",
                hint="release finished sequences or load the model with a larger --ctx",
            )
        if rc != 0:
            raise ModelError(f"llama_decode failed with code {rc} on {self.name}")

    def _read_rows(self, marks: list[int], logits: np.ndarray, hidden: np.ndarray) -> None:
        """The logits and hidden states of the batch's rows ``marks``, by batch index."""
        ctx = self._ctx.ctx
        for j, i in enumerate(marks):
            logits[j] = np.ctypeslib.as_array(self._lc.llama_get_logits_ith(ctx, i), shape=(self.vocab_size,))
            hidden[j] = np.ctypeslib.as_array(self._lc.llama_get_embeddings_ith(ctx, i), shape=(self.n_embd,))

    def last_hidden(self) -> np.ndarray:
        if not self.hidden_states:
            return super().last_hidden()
        return self._hidden

    def _fill_batch(self, rows: list[tuple[int, int, tuple[int, ...]]], marks: list[int]) -> None:
        """Fill the batch; the rows whose indexes are in ``marks`` output logits."""
        b = self._batch.batch
        b.n_tokens = len(rows)
        for i, (tok, pos, seq_ids) in enumerate(rows):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = len(seq_ids)
            for j, sid in enumerate(seq_ids):
                b.seq_id[i][j] = sid
            b.logits[i] = 0
        for i in marks:
            b.logits[i] = 1

    def close(self) -> None:
        super().close()
        for obj in ("_batch", "_ctx", "_model"):
            if hasattr(self, obj):
                getattr(self, obj).close()
