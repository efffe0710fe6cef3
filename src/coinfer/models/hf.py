"""transformers/PyTorch backend: one ``DynamicCache`` per sequence, CPU or CUDA.

Several sequences' chains (``extend_many``) run as one padded batch: caches left-padded,
chains right-padded, an attention mask hiding both, and each sequence's new entries cut
back out into its own cache.

Chains are ordinary cached forwards. A token tree is one forward with explicit
``position_ids`` (``len(seq) + depth``) and a 4D additive attention mask in which each
node sees the whole prefix, its ancestors and itself. ``commit_path`` keeps the kept
nodes' cache entries with ``index_select``; ``truncate`` slices the cache;
``save_state`` copies it out to host memory (``hf_state``). Caches are
built without the model config, so sliding-window layers keep every entry and can be
rolled back; their window is in the masks (the model's own for chains, the tree mask's
for trees).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coinfer.errors import MissingDependencyError, ModelError
from coinfer.models.base import Prompter, Seq, SteerableModel, backend_seq
from coinfer.models.chat_template import ChatTemplate
from coinfer.models.hf_state import pack_layers, unpack_layers
from coinfer.models.tree import TokenTree
from coinfer.models.windows import window_within

__all__ = [
    "HFModel",
    "HFTokenizer",
    "branch_attention_mask",
    "commit_tree_path",
    "import_torch",
    "keep_cache_slots",
    "tree_attention_mask",
]

# Control tokens that end generation, as llama.cpp's vocabulary marks them (EOG): turn ends
# of the common chat formats and the fill-in-the-middle separators, so that both backends
# stop at the same token.
_END_OF_GENERATION = {
    "<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<|eom_id|>", "</s>",
    "<EOT>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<reponame>",
}  # fmt: skip


def import_torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError as exc:
        raise MissingDependencyError("torch/transformers", "torch") from exc
    return torch


class HFTokenizer(Prompter):
    """A transformers tokenizer, its chat template and end-of-generation ids."""

    def __init__(self, tokenizer: Any, generation_config: Any, vocab_size: int, *, name: str = "") -> None:
        self.name = name
        self.tok = tokenizer
        self.vocab_size = vocab_size
        self.eos_ids = frozenset(self._eos_ids(generation_config))
        self.template = self._read_template()

    @classmethod
    def load(cls, folder: str | Path, *, name: str = "") -> HFTokenizer:
        """The tokenizer of the checkpoint in ``folder``."""
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        try:
            tok = AutoTokenizer.from_pretrained(folder)
            vocab = int(AutoConfig.from_pretrained(folder).vocab_size)
            generation = GenerationConfig.from_pretrained(folder)
        except (OSError, ValueError, KeyError) as exc:
            raise ModelError(f"transformers could not load the tokenizer in {folder}: {exc}") from exc
        return cls(tok, generation, vocab, name=name or Path(folder).name)

    def _eos_ids(self, generation_config: Any) -> set[int]:
        ids: set[int] = set()
        for value in (self.tok.eos_token_id, getattr(generation_config, "eos_token_id", None)):
            if isinstance(value, int):
                ids.add(value)
            elif isinstance(value, (list, tuple)):
                ids.update(int(v) for v in value)
        vocab = self.tok.get_vocab()
        ids.update(int(vocab[text]) for text in _END_OF_GENERATION if text in vocab)
        return {i for i in ids if 0 <= i < self.vocab_size}

    def _read_template(self) -> ChatTemplate:
        bos_id = self.tok.bos_token_id
        probe = self.tok("a", add_special_tokens=True)["input_ids"]
        return ChatTemplate(
            source=getattr(self.tok, "chat_template", None),
            bos_token=self.tok.bos_token or "",
            eos_token=self.tok.eos_token or "",
            bos_id=bos_id,
            add_bos=bool(bos_id is not None and probe and probe[0] == bos_id),
        )

    def tokenize(self, text: str, *, special: bool = False, add_bos: bool = False) -> list[int]:
        ids = list(self.tok(text, add_special_tokens=False, split_special_tokens=not special)["input_ids"])
        if add_bos and self.template.bos_id is not None:
            ids.insert(0, self.template.bos_id)
        return ids

    def detokenize(self, ids: Sequence[int]) -> str:
        return str(self.tok.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False))


@dataclass(eq=False)
class HFSeq(Seq):
    """A sequence and its own ``DynamicCache``."""

    cache: Any = None


def tree_attention_mask(start: int, tree: TokenTree, dtype: Any) -> Any:
    """Additive mask (1, 1, n, start + n) for a tree after ``start`` cached tokens: 0 where
    a node may look (the prefix, its ancestors and itself), dtype-min elsewhere."""
    return branch_attention_mask([-1] * start, [-1] * len(tree), tree.parents, dtype)


def _slide_window(mask: Any, start: int, tree: TokenTree, window: int) -> Any:
    """``mask`` (a tree's, above) with a sliding ``window`` applied in place: a node at
    ``start + depth`` sees no entry ``window`` or more positions back (the cache's entry
    ``j`` sits at position ``j``)."""
    torch = import_torch()
    at = torch.tensor([start + d for d in tree.depths()], dtype=torch.long)
    entries = torch.cat([torch.arange(start), at])
    far = (at[:, None] - entries[None, :] >= window).to(mask.device)
    mask[0, 0].masked_fill_(far, torch.finfo(mask.dtype).min)
    return mask


def commit_tree_path(cache: Any, start: int, path: Sequence[int]) -> None:
    """Keep a ``DynamicCache``'s first ``start`` entries and then the tree nodes ``path``
    (indices into the tree that followed them), in that order."""
    if list(path) == list(range(len(path))):  # the tree's first nodes: the rest cut off, no copy
        cache.crop(start + len(path) - cache.get_seq_length())  # this transformers crops by a negative count
        return
    keep_cache_slots(cache, [*range(start), *(start + n for n in path)])


def keep_cache_slots(cache: Any, keep: Sequence[int]) -> None:
    """Keep only the cache entries ``keep`` (indices, in the order given)."""
    torch = import_torch()
    layers = [layer for layer in cache.layers if getattr(layer, "is_initialized", False)]
    if not layers:
        return
    index = torch.tensor(list(keep), dtype=torch.long, device=layers[0].keys.device)
    for layer in layers:
        layer.keys = layer.keys.index_select(-2, index)
        layer.values = layer.values.index_select(-2, index)


def branch_attention_mask(
    labels: Sequence[int], branches: Sequence[int], parents: Sequence[int], dtype: Any
) -> Any:
    """Additive mask (1, 1, n, len(labels) + n) for n new nodes of several branches after a
    cache whose entries carry ``labels`` (-1: shared by every branch, b: branch b's own).
    New node i of branch ``branches[i]`` (-1: shared) sees the shared entries, its branch's
    and, among the new nodes, itself and its ancestors (``parents``, -1: none)."""
    torch = import_torch()
    cached = torch.tensor(list(labels), dtype=torch.long)
    mine = torch.tensor(list(branches), dtype=torch.long)
    sees_cache = (cached[None, :] == -1) | (cached[None, :] == mine[:, None])
    tree = TokenTree.of([0] * len(parents), parents)
    allowed = torch.cat([sees_cache, torch.from_numpy(tree.attention_mask())], dim=1)
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def _hseq(seq: Seq) -> HFSeq:
    return backend_seq(seq, HFSeq)


class HFModel(SteerableModel):
    """A transformers causal LM and its tokenizer behind the steerable contract."""

    backend = "transformers"

    def __init__(self, model: Any, tokenizer: Any, *, name: str, n_ctx: int | None = None) -> None:
        super().__init__()
        self._torch = import_torch()
        self.model = model.eval()
        self.tok = tokenizer
        self.name = name
        self.device = next(model.parameters()).device
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        limit = getattr(model.config, "max_position_embeddings", None) or 4096
        self.n_ctx = min(n_ctx, limit) if n_ctx else min(4096, limit)
        self._window = window_within(model.config, self.n_ctx)  # a sliding window that hides some
        self._text = HFTokenizer(tokenizer, model.generation_config, self.vocab_size)
        self.eos_ids = self._text.eos_ids
        self.template = self._text.template

    def tokenize(self, text: str, *, special: bool = False, add_bos: bool = False) -> list[int]:
        return self._text.tokenize(text, special=special, add_bos=add_bos)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._text.detokenize(ids)

    # ---- sequences --------------------------------------------------------------------
    def _new_seq(self, seq_id: int) -> Seq:
        from transformers import DynamicCache

        return HFSeq(seq_id, cache=DynamicCache())

    def _release(self, seq: Seq) -> None:
        _hseq(seq).cache = None

    def _layers(self, seq: Seq) -> list[Any]:
        return [layer for layer in _hseq(seq).cache.layers if getattr(layer, "is_initialized", False)]

    def _truncate(self, seq: Seq, length: int) -> None:
        for layer in self._layers(seq):
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]

    def _fork(self, source: Seq, new: Seq) -> None:
        """The new cache holds the same tensors: every change to a cache (``update``,
        ``truncate``, ``commit_path``) makes new tensors, so sharing them is safe."""
        own = _hseq(new).cache
        for index, layer in enumerate(self._layers(source)):
            own.update(layer.keys, layer.values, index)

    def _save_state(self, seq: Seq) -> bytes:
        layers = self._layers(seq)
        return pack_layers([layer.keys for layer in layers], [layer.values for layer in layers])

    def _restore(self, seq: Seq, data: bytes | bytearray) -> None:
        own = _hseq(seq).cache
        keys, values = unpack_layers(data, self.device, name=self.name)
        if keys and len(keys) != self.model.config.num_hidden_layers:
            raise ModelError(f"{self.name} cannot restore a saved cache of another model")
        with self._torch.inference_mode():
            for index, (k, v) in enumerate(zip(keys, values, strict=True)):
                own.update(k, v, index)

    def _commit_path(self, seq: Seq, path: list[int]) -> None:
        commit_tree_path(_hseq(seq).cache, len(seq.tokens), path)

    # ---- forward ----------------------------------------------------------------------
    def _extend(self, seq: Seq, ids: list[int], tree: TokenTree | None, last_only: bool) -> np.ndarray:
        torch = self._torch
        start = len(seq.tokens)
        offsets = list(range(len(ids))) if tree is None else tree.depths()
        kwargs: dict[str, Any] = {
            "input_ids": torch.tensor([ids], device=self.device),
            "position_ids": torch.tensor([[start + d for d in offsets]], device=self.device),
            "past_key_values": _hseq(seq).cache,
            "use_cache": True,
        }
        if tree is not None:
            kwargs["attention_mask"] = self._tree_mask(start, tree)
        if last_only:
            kwargs["logits_to_keep"] = 1
        try:
            with torch.inference_mode():
                out = self.model(**kwargs)
        except RuntimeError as exc:
            self._truncate(seq, start)
            raise ModelError(f"{self.name} forward failed: {exc}") from exc
        return out.logits[0].float().cpu().numpy()

    def _extend_many(self, items: list[tuple[Seq, list[int]]], last_only: bool) -> list[np.ndarray]:
        """Several sequences' chains in one padded forward (see ``_batched_forward``)."""
        if len(items) < 2 or any(not ids for _, ids in items):
            return [self._extend(seq, ids, None, last_only) for seq, ids in items]
        return self._batched_forward(items, last_only)

    def _batched_forward(self, items: list[tuple[Seq, list[int]]], last_only: bool) -> list[np.ndarray]:
        """One forward over a batch: every sequence's cache left-padded to the longest
        (``P`` entries), every chain right-padded to the longest (``N`` tokens), and a 2D
        attention mask that hides both paddings. Each sequence's new cache entries are then
        cut out of the batch's and appended to its own cache."""
        torch = self._torch
        past = [len(seq.tokens) for seq, _ in items]
        top, longest = max(past), max(len(ids) for _, ids in items)
        cache = self._padded_cache([seq for seq, _ in items], past, top)
        pad = 0 if self.tok.pad_token_id is None else int(self.tok.pad_token_id)
        ids = [list(chain) + [pad] * (longest - len(chain)) for _, chain in items]
        mask = torch.zeros((len(items), top + longest), dtype=torch.long)
        for i, ((_, chain), p) in enumerate(zip(items, past, strict=True)):
            mask[i, top - p : top + len(chain)] = 1
        positions = [[p + j for j in range(longest)] for p in past]
        try:
            with torch.inference_mode():
                out = self.model(
                    input_ids=torch.tensor(ids, device=self.device),
                    position_ids=torch.tensor(positions, device=self.device),
                    attention_mask=mask.to(self.device),
                    past_key_values=cache,
                    use_cache=True,
                )
        except RuntimeError as exc:
            raise ModelError(f"{self.name} batched forward failed: {exc}") from exc
        for i, (seq, chain) in enumerate(items):
            self._append_entries(seq, cache, i, top, len(chain))
        logits = out.logits.float().cpu().numpy()
        rows = [logits[i, : len(chain)] for i, (_, chain) in enumerate(items)]
        return [r[-1:] for r in rows] if last_only else rows

    def _padded_cache(self, seqs: list[Seq], past: list[int], top: int) -> Any:
        """A ``DynamicCache`` of the sequences' caches, each left-padded with zeros to ``top``."""
        from transformers import DynamicCache

        cache = DynamicCache()
        layers = [self._layers(seq) for seq in seqs]
        shapes = next((ls for ls in layers if ls), None)
        if top == 0 or shapes is None:
            return cache
        torch = self._torch
        for index, like in enumerate(shapes):
            keys, values = [], []
            for seq_layers, p in zip(layers, past, strict=True):
                k = seq_layers[index].keys if seq_layers else like.keys[..., :0, :]
                v = seq_layers[index].values if seq_layers else like.values[..., :0, :]
                keys.append(torch.nn.functional.pad(k, (0, 0, top - p, 0)))
                values.append(torch.nn.functional.pad(v, (0, 0, top - p, 0)))
            cache.update(torch.cat(keys), torch.cat(values), index)
        return cache

    def _append_entries(self, seq: Seq, cache: Any, row: int, top: int, n: int) -> None:
        """Append row ``row``'s ``n`` new entries of the batch ``cache`` to ``seq``'s cache."""
        torch = self._torch
        own, mine = _hseq(seq).cache, self._layers(seq)  # none yet for a sequence that was empty
        for index, layer in enumerate(cache.layers):
            k = layer.keys[row : row + 1, :, top : top + n].clone()
            v = layer.values[row : row + 1, :, top : top + n].clone()
            if index < len(mine):
                mine[index].keys = torch.cat([mine[index].keys, k], dim=-2)
                mine[index].values = torch.cat([mine[index].values, v], dim=-2)
            else:
                own.update(k, v, index)

    def _tree_mask(self, start: int, tree: TokenTree) -> Any:
        """The tree's mask; where some layers slide a window that hides part of the
        context, one mask per kind of layer (transformers takes them by kind)."""
        mask = tree_attention_mask(start, tree, self.model.dtype).to(self.device)
        if self._window is None:
            return mask
        if getattr(self.model.config, "layer_types", None) is None:
            return _slide_window(mask, start, tree, self._window)  # every layer slides it (Mistral)
        return {
            "full_attention": mask,
            "sliding_attention": _slide_window(mask.clone(), start, tree, self._window),
        }

    def close(self) -> None:
        super().close()
        self.model = None
