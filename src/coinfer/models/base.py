"""The steerable-model contract: logits for every position, and control of the KV cache.

A ``SteerableModel`` holds any number of independent ``Seq`` handles (llama.cpp: a seq_id
in one shared context; transformers: one ``DynamicCache`` each). ``extend`` appends
tokens and returns their logits; with ``parents`` the tokens form a ``TokenTree`` whose
nodes see only their ancestors, and the tree stays *pending* until ``commit_path`` keeps
one root-to-node path of it or ``truncate`` drops it; ``fork`` starts a new sequence as a
copy of another; ``save_state`` copies a sequence's cache out to host memory and
``restore`` makes a new sequence of it, where the backend can. The validation and bookkeeping
live here once; a backend only implements the ``_``-prefixed hooks. Every misuse of a
sequence handle is a ``SequenceError``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from coinfer.errors import ConfigError, ContextOverflowError, ModelError, SequenceError
from coinfer.models.chat_template import ChatTemplate, Message
from coinfer.models.tree import TokenTree

__all__ = [
    "CheckedForward",
    "Forward",
    "ForwardClock",
    "Prompter",
    "Seq",
    "SeqState",
    "SteerableModel",
    "TokenConstraint",
    "backend_seq",
]

S = TypeVar("S", bound="Seq")


@dataclass(eq=False)
class Seq:
    """One independent sequence: the tokens its KV cache holds, and a pending tree."""

    id: int
    tokens: list[int] = field(default_factory=list)
    pending: TokenTree | None = None  # the last tree ``extend``, not yet committed
    released: bool = False

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True, eq=False)
class SeqState:
    """A sequence's cache copied out to host memory (``save_state``): its ``tokens`` and the
    backend's bytes of their cache, to ``restore`` as a new sequence without reading them."""

    tokens: tuple[int, ...]
    data: bytes | bytearray

    @property
    def nbytes(self) -> int:
        return len(self.data)


@dataclass
class ForwardClock:
    """Seconds a model has spent so far (they only grow): computing forwards
    (``compute_s``), and moving their logits out to Python, copies and argmaxes
    (``logits_s``). A backend that cannot tell the two apart leaves both at 0."""

    compute_s: float = 0.0
    logits_s: float = 0.0


@dataclass(frozen=True)
class Forward:
    """One sequence's part of a merged forward (``extend_batch``): a chain of ``ids``, or
    a tree with ``parents``, appended to ``seq``. Its result is every row's logits, the
    last row's alone (``last_only``, chains only), or with ``greedy`` each of those rows'
    most likely next token (int64) instead of its logits."""

    seq: Seq
    ids: Sequence[int]
    parents: Sequence[int] | None = None
    last_only: bool = False
    greedy: bool = False


@dataclass(frozen=True)
class CheckedForward:
    """A ``Forward`` whose ids were checked, its tree built."""

    seq: Seq
    ids: list[int]
    tree: TokenTree | None
    last_only: bool
    greedy: bool


def backend_seq(seq: Seq, kind: type[S]) -> S:
    """``seq`` as the backend's own sequence type; another backend's is a ``SequenceError``."""
    if not isinstance(seq, kind):
        raise SequenceError(f"sequence {seq.id} belongs to another backend's model")
    return seq


class TokenConstraint(Protocol):
    """Which tokens may come next in one conversation (a grammar, say), as its text grows."""

    def allows(self, token: int) -> bool: ...
    def restrict(self, logits: np.ndarray) -> np.ndarray: ...
    def accept(self, token: int) -> None: ...
    def close(self) -> None: ...


class Prompter(ABC):
    """Text to token ids and back, and the model's chat template: all a model's prompts
    need (a steerable model is one; so is a tokenizer alone, for engines whose layers
    live in other processes)."""

    name: str
    template: ChatTemplate
    eos_ids: frozenset[int]

    @abstractmethod
    def tokenize(self, text: str, *, special: bool = False, add_bos: bool = False) -> list[int]:
        """Text to token ids; ``special`` parses control tokens such as ``<|im_start|>``."""

    @abstractmethod
    def detokenize(self, ids: Sequence[int]) -> str:
        """Token ids to text (control tokens rendered as text)."""

    def chat_prompt(
        self,
        messages: Sequence[Message],
        *,
        add_generation_prompt: bool = True,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[int]:
        """The model's own chat template applied to ``messages`` (and the ``tools`` it
        lists), as token ids."""
        text = self.template.render(messages, add_generation_prompt=add_generation_prompt, tools=tools)
        ids = self.tokenize(text, special=True)
        if (
            self.template.add_bos
            and self.template.bos_id is not None
            and (not ids or ids[0] != self.template.bos_id)
        ):
            ids.insert(0, self.template.bos_id)
        return ids

    def text_prompt(self, text: str) -> list[int]:
        """A raw prompt (no chat template), with BOS when the model asks for one."""
        return self.tokenize(text, add_bos=self.template.add_bos)

    def user_prompt(self, text: str, *, system: str | None = None) -> list[int]:
        """``text`` as a user's message in the model's chat template (after ``system``, if
        given); plain text, as ``text_prompt``, when the model has no chat template."""
        if not self.template.source:
            return self.text_prompt(text)
        messages: list[Message] = [{"role": "system", "content": system}] if system else []
        return self.chat_prompt([*messages, {"role": "user", "content": text}])


class SteerableModel(Prompter):
    """A language model whose next-token logits and KV cache coinfer controls."""

    name: str
    backend: str
    vocab_size: int
    n_ctx: int
    kv_cells_shared: bool = False  # all sequences share the n_ctx cache cells (llama.cpp)
    max_sequences: int | None = None  # how many sequences may be live at once (None: no limit)
    # A prompt continued from a cached prefix (``fork``) is cut at a multiple of
    # ``prefix_block`` tokens and reads at least ``min_tail`` itself, so that its rows take
    # the kernels they take when the whole prompt is read, and its answer is the same
    # (both at least 1).
    prefix_block: int = 1
    min_tail: int = 1
    weights_file: Path | None = None  # the file the weights are memory-mapped from, paged on demand
    # called with a layer's index as soon as a forward has computed it (a backend that can
    # tell, when asked to: llama.cpp loaded with layer_progress=True); None: nobody listens
    layer_listener: Callable[[int], None] | None = None

    def __init__(self) -> None:
        self._next_seq_id = 0
        self._live: dict[int, Seq] = {}
        self.clock = ForwardClock()

    # ---- sequences --------------------------------------------------------------------
    def new_sequence(self) -> Seq:
        """A fresh, empty, independent sequence."""
        seq = self._new_seq(self._next_seq_id)
        self._next_seq_id += 1
        self._live[seq.id] = seq
        return seq

    def fork(self, seq: Seq) -> Seq:
        """A new sequence that starts as a copy of ``seq``: its tokens and its cache (a
        token tree's branches grow this way, each from the point where it splits off).
        llama.cpp shares the cells, transformers the cache tensors; neither is recomputed."""
        self._check_live(seq)
        if seq.pending is not None:
            raise SequenceError(
                "cannot fork a sequence with a pending token tree: commit or truncate it first"
            )
        new = self.new_sequence()
        try:
            self._fork(seq, new)
        except BaseException:
            self.release(new)
            raise
        new.tokens = list(seq.tokens)
        return new

    def save_state(self, seq: Seq) -> SeqState | None:
        """``seq``'s cache copied out to host memory, to ``restore`` later as a new sequence
        (a conversation's cache kept where no sequence slot or cell holds it); None where
        the backend cannot copy a cache out."""
        self._check_live(seq)
        if seq.pending is not None:
            raise SequenceError(
                "cannot save a sequence with a pending token tree: commit or truncate it first"
            )
        data = self._save_state(seq)
        return None if data is None else SeqState(tuple(seq.tokens), data)

    def park(self, seq: Seq) -> Seq:
        """``seq`` (its tokens and cache) out of the way of the sequences still decoding: a
        finished conversation's cache kept for reuse. Where the backend runs sequences
        together only on neighbouring slots (llama.cpp with a cache per sequence), it moves
        to the last free slot, so the next conversation takes the one it leaves and the
        running ones stay neighbours; the sequence to use from then on is returned (``seq``
        itself where nothing moved)."""
        self._check_live(seq)
        return seq

    def pack(self, seq: Seq) -> Seq:
        """``seq`` (its tokens and cache) moved down among the sequences decoding, where the
        backend runs sequences together only on neighbouring slots and a lower one is free:
        the running ones close the gap a finished one left (``park``'s other side)."""
        self._check_live(seq)
        return seq

    def packed(self, seqs: Sequence[Seq]) -> list[Seq]:
        """``seqs`` (the ones decoding together), the furthest moved down (``pack``) one at
        a time while a step of a row each would run as several passes (``pass_rows``): with
        nobody waiting to take a finished request's slot, the last requests of a crowd ran
        as passes of 2 + 1 + 1 where one of 4 would do."""
        seqs = list(seqs)
        while len(self.pass_rows([(s, 1) for s in seqs])) > 1:
            last = max(range(len(seqs)), key=lambda i: self.batch_order(seqs[i]))
            moved = self.pack(seqs[last])
            if moved is seqs[last]:
                break
            seqs[last] = moved
        return seqs

    def restore(self, state: SeqState) -> Seq:
        """A new sequence holding ``state``'s tokens and their cache (``save_state``), as
        the forward that read them left it: nothing is recomputed."""
        new = self.new_sequence()
        try:
            self._restore(new, state.data)
        except BaseException:
            self.release(new)
            raise
        new.tokens = list(state.tokens)
        return new

    def extend(
        self,
        seq: Seq,
        ids: Sequence[int],
        *,
        parents: Sequence[int] | None = None,
        last_only: bool = False,
    ) -> np.ndarray:
        """Append ``ids`` (a chain, or a tree when ``parents`` is given).

        Returns float32 logits of shape (len(ids), vocab), or (1, vocab) for the last
        token alone when ``last_only`` (a prompt's prefill needs no more).
        """
        ids = self._check_extend(seq, ids)
        if parents is None:
            logits = self._extend(seq, ids, None, last_only)
            seq.tokens.extend(ids)
            return logits
        if last_only:
            raise ConfigError("last_only applies to a chain, not to a token tree")
        tree = TokenTree.of(ids, parents)
        logits = self._extend(seq, ids, tree, False)
        seq.pending = tree
        return logits

    def extend_greedy(
        self, seq: Seq, ids: Sequence[int], *, parents: Sequence[int] | None = None
    ) -> np.ndarray:
        """Append a chain of ``ids`` (or a tree, as ``extend``) and return only each
        position's most likely next token (int64, shape (len(ids),)): what greedy
        verification needs, without moving len(ids) x vocab logits (llama.cpp takes the
        argmax on its own logits buffer, a GPU on the device)."""
        ids = self._check_extend(seq, ids)
        if parents is None:
            choices = self._extend_greedy(seq, ids)
            seq.tokens.extend(ids)
            return choices
        tree = TokenTree.of(ids, parents)
        choices = self._extend_greedy_tree(seq, ids, tree)
        seq.pending = tree
        return choices

    def extend_many(
        self, items: Sequence[tuple[Seq, Sequence[int]]], *, last_only: bool = False
    ) -> list[np.ndarray]:
        """Extend several sequences by chains; a backend may run them as one batch.

        Logits (len(ids), vocab) per item, or (1, vocab) for its last token when ``last_only``
        (prefilling several long prompts at once).
        """
        return self._many(items, "extend_many", lambda checked: self._extend_many(checked, last_only))

    def extend_many_greedy(self, items: Sequence[tuple[Seq, Sequence[int]]]) -> np.ndarray:
        """``extend_many``, returning only the most likely token after each item's chain
        (int64, shape (len(items),)): what a greedy draft model needs per step, without
        moving a vocabulary of logits per sequence off the device."""
        return self._many(items, "extend_many_greedy", self._extend_many_greedy)

    def extend_many_choices(self, items: Sequence[tuple[Seq, Sequence[int]]]) -> list[np.ndarray]:
        """``extend_many``, returning each item's greedy choice after every one of its
        tokens (int64, shape (len(ids),)) instead of its logits: what a batch's greedy
        verification needs, one id per row off the device, not a vocabulary."""
        return self._many(items, "extend_many_choices", self._extend_many_choices)

    def extend_many_rows(
        self, items: Sequence[tuple[Seq, Sequence[int]]], logits_for: Sequence[bool]
    ) -> list[np.ndarray]:
        """``extend_many``, returning each item's logits after every one of its tokens
        (len(ids), vocab) where ``logits_for`` asks, else its greedy choices there (int64,
        shape (len(ids),)): a batch that verifies the drafts of requests that sample beside
        those of greedy ones."""
        want = self._wanted(items, logits_for)
        if not any(want):
            return self.extend_many_choices(items)
        return self.extend_batch(
            [Forward(seq, ids, greedy=not w) for (seq, ids), w in zip(items, want, strict=True)]
        )

    def extend_many_next(
        self, items: Sequence[tuple[Seq, Sequence[int]]], logits_for: Sequence[bool]
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        """``extend_many`` for the next token of each item: its greedy choice (int64, shape
        (len(items),)), and its last token's logits (vocab,) only where ``logits_for`` asks
        (else None). A batch of greedy and sampled requests moves a vocabulary of logits off
        the device only for the ones that sample."""
        want = self._wanted(items, logits_for)
        return self._many(items, "extend_many_next", lambda checked: self._extend_many_next(checked, want))

    @staticmethod
    def _wanted(items: Sequence[tuple[Seq, Sequence[int]]], logits_for: Sequence[bool]) -> list[bool]:
        want = [bool(w) for w in logits_for]
        if len(want) != len(items):
            raise ConfigError(f"logits_for has {len(want)} entries for {len(items)} items")
        return want

    def _many(self, items: Sequence[tuple[Seq, Sequence[int]]], what: str, run: Callable[[Any], Any]) -> Any:
        """Check several sequences' chains, run them, then append each chain to its sequence."""
        checked = [(seq, self._check_extend(seq, ids)) for seq, ids in items]
        if len({s.id for s, _ in checked}) != len(checked):
            raise SequenceError(f"{what} got the same sequence twice; merge its tokens")
        out = run(checked)
        for seq, ids in checked:
            seq.tokens.extend(ids)
        return out

    def extend_batch(self, forwards: Sequence[Forward]) -> list[np.ndarray]:
        """Several sequences' chains and trees in one forward where the backend can (llama.cpp
        decodes all their rows in one batch): what requests served together verify per
        step. One result per ``Forward``, as its flags ask. Should the forward fail, every
        sequence is left as it was before the call."""
        checked = [self._checked(f) for f in forwards]
        if len({c.seq.id for c in checked}) != len(checked):
            raise SequenceError("extend_batch got the same sequence twice; merge its tokens")
        try:
            out = self._extend_batch(checked)
        except BaseException:
            for c in checked:  # drop whatever cells or tree slots the failed forward took
                self._truncate(c.seq, len(c.seq.tokens))
            raise
        for c in checked:
            if c.tree is None:
                c.seq.tokens.extend(c.ids)
            else:
                c.seq.pending = c.tree
        return out

    def _checked(self, f: Forward) -> CheckedForward:
        ids = self._check_extend(f.seq, f.ids)
        if f.parents is None:
            return CheckedForward(f.seq, ids, None, f.last_only, f.greedy)
        if f.last_only:
            raise ConfigError("last_only applies to a chain, not to a token tree")
        return CheckedForward(f.seq, ids, TokenTree.of(ids, f.parents), False, f.greedy)

    def commit_path(self, seq: Seq, nodes: Sequence[int]) -> None:
        """Keep the pending tree's root-to-node path ``nodes`` (indexes into its ids)."""
        self._check_live(seq)
        tree = seq.pending
        if tree is None:
            raise SequenceError("commit_path needs a pending tree: call extend(..., parents=...) first")
        path = [int(n) for n in nodes]
        if not tree.is_path(path):
            raise SequenceError(f"nodes {path} is not a root-to-node path of the pending tree")
        self._commit_path(seq, path)
        seq.tokens.extend(tree.tokens[n] for n in path)
        seq.pending = None

    def truncate(self, seq: Seq, length: int) -> None:
        """Roll the sequence back to its first ``length`` tokens (drops any pending tree)."""
        self._check_live(seq)
        if not 0 <= length <= len(seq.tokens):
            raise SequenceError(f"cannot truncate a sequence of {len(seq.tokens)} tokens to {length}")
        self._truncate(seq, length)
        del seq.tokens[length:]
        seq.pending = None

    def release(self, seq: Seq) -> None:
        """Free the sequence's cache; the handle may not be used again."""
        if seq.released:
            return
        self._release(seq)
        seq.released = True
        self._live.pop(seq.id, None)

    def batch_order(self, seq: Seq) -> int:
        """A key that sorts a batch's sequences so that neighbours are cheap to run in one
        forward; creation order here. llama.cpp with a cache per sequence: its stream, as a
        forward's attention spans every stream from its lowest to its highest, and a batch
        runs as one pass only over streams in increasing, consecutive order."""
        return seq.id

    def pass_rows(self, items: Sequence[tuple[Seq, int]]) -> list[int]:
        """The rows of each pass this model runs for one batch in which each sequence of
        ``items`` brings that many rows: one pass of them all here (``decoding.batch_shape``)."""
        return [sum(n for _, n in items)]

    @property
    def live_sequences(self) -> int:
        """How many sequences are live (made and not yet released)."""
        return len(self._live)

    def set_threads(self, n: int) -> int | None:
        """Compute with ``n`` CPU threads from now on; the previous count, or None where the
        backend cannot change it per model (torch's thread pool is process-wide)."""
        return None

    def last_hidden(self) -> np.ndarray:
        """The last hidden states (after the final norm: what the output head reads) of the
        rows the latest forward returned logits for, (rows, hidden); a backend keeps them
        only when loaded to (llama.cpp: ``hidden_states=True``)."""
        raise ModelError(
            f"{self.name} on {self.backend} keeps no hidden states",
            hint="load it on llama.cpp with hidden_states=True (coinfer generate --draft heads:DIR does)",
        )

    def json_constraint(self, schema: Mapping[str, Any]) -> TokenConstraint | None:
        """A constraint that keeps a reply to JSON matching ``schema``, or None where the
        backend cannot constrain (callers then validate the reply and retry)."""
        return None

    def close(self) -> None:
        """Free every sequence and the model itself."""
        for seq in list(self._live.values()):
            self.release(seq)

    def __enter__(self) -> SteerableModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- checks -----------------------------------------------------------------------
    def _check_live(self, seq: Seq) -> None:
        if seq.released or self._live.get(seq.id) is not seq:
            raise SequenceError(f"sequence {seq.id} was released or belongs to another model")

    def _check_extend(self, seq: Seq, ids: Sequence[int]) -> list[int]:
        self._check_live(seq)
        if seq.pending is not None:
            raise SequenceError(
                "the sequence has a pending token tree: call commit_path() or truncate() first"
            )
        out = [int(t) for t in ids]
        if not out:
            raise ConfigError("extend needs at least one token")
        bad = [t for t in out if not 0 <= t < self.vocab_size]
        if bad:
            raise ConfigError(f"token ids {bad[:5]} are outside the vocabulary (0..{self.vocab_size - 1})")
        if len(seq.tokens) + len(out) > self.n_ctx:
            raise ContextOverflowError(
                f"{len(seq.tokens)} + {len(out)} tokens exceed the context window of {self.n_ctx}",
                hint="shorten the prompt, lower --max-tokens, or load the model with a larger --ctx",
            )
        return out

    # ---- backend hooks ----------------------------------------------------------------
    def _new_seq(self, seq_id: int) -> Seq:
        return Seq(seq_id)

    @abstractmethod
    def _extend(self, seq: Seq, ids: list[int], tree: TokenTree | None, last_only: bool) -> np.ndarray: ...

    def _extend_many(self, items: list[tuple[Seq, list[int]]], last_only: bool) -> list[np.ndarray]:
        return [self._extend(seq, ids, None, last_only) for seq, ids in items]

    def _extend_greedy(self, seq: Seq, ids: list[int]) -> np.ndarray:
        return np.argmax(self._extend(seq, ids, None, False), axis=-1)

    def _extend_greedy_tree(self, seq: Seq, ids: list[int], tree: TokenTree) -> np.ndarray:
        return np.argmax(self._extend(seq, ids, tree, False), axis=-1)

    def _extend_many_greedy(self, items: list[tuple[Seq, list[int]]]) -> np.ndarray:
        return np.array([int(np.argmax(rows[-1])) for rows in self._extend_many(items, True)], dtype=np.int64)

    def _extend_many_choices(self, items: list[tuple[Seq, list[int]]]) -> list[np.ndarray]:
        return [np.argmax(rows, axis=-1) for rows in self._extend_many(items, False)]

    def _extend_many_next(
        self, items: list[tuple[Seq, list[int]]], want: list[bool]
    ) -> tuple[np.ndarray, list[np.ndarray | None]]:
        lasts = [rows[-1] for rows in self._extend_many(items, True)]
        choices = np.array([int(np.argmax(row)) for row in lasts], dtype=np.int64)
        return choices, [row if w else None for row, w in zip(lasts, want, strict=True)]

    def _extend_batch(self, forwards: list[CheckedForward]) -> list[np.ndarray]:
        """One forward after another (a backend that can merges them into one)."""
        out = []
        for f in forwards:
            if f.tree is not None and f.greedy:
                rows = self._extend_greedy_tree(f.seq, f.ids, f.tree)
            elif f.tree is not None:
                rows = self._extend(f.seq, f.ids, f.tree, False)
            elif f.greedy:
                rows = self._extend_greedy(f.seq, f.ids)
                rows = rows[-1:] if f.last_only else rows
            else:
                rows = self._extend(f.seq, f.ids, None, f.last_only)
            out.append(rows)
        return out

    @abstractmethod
    def _fork(self, source: Seq, new: Seq) -> None: ...

    def _save_state(self, seq: Seq) -> bytes | bytearray | None:
        return None  # a backend that can copy a cache out says how

    def _restore(self, seq: Seq, data: bytes | bytearray) -> None:
        raise ModelError(f"{self.name} on {self.backend} cannot restore a saved cache")

    @abstractmethod
    def _commit_path(self, seq: Seq, path: list[int]) -> None: ...

    @abstractmethod
    def _truncate(self, seq: Seq, length: int) -> None: ...

    @abstractmethod
    def _release(self, seq: Seq) -> None: ...
