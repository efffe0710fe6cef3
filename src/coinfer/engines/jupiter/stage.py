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

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coinfer.errors import ConfigError
from coinfer.models.hf import branch_attention_mask, commit_tree_path, keep_cache_slots
from coinfer.models.layer_range import keep_layers, layer_count, load_layer_range
from coinfer.models.static_layers import greedy_ids
from coinfer.models.tree import TokenTree

__all__ = ["Stage", "entries_kept", "forward_output"]


def forward_output(stage: Any, hidden: Any, logits: str) -> Any:
    """What ``forward`` returns for its new tokens' hidden states (1, n, d): them, on a stage
    before the last; on the last what ``logits`` asks for."""
    if not stage.last:
        return hidden
    if logits == "none":
        return None
    if logits == "hidden":  # the last token's, for heads that guess from it
        return hidden[0, -1]
    return stage.head(hidden[:, -1:] if logits == "last" else hidden)


def entries_kept(stage: Any, slots: Sequence[int]) -> list[int]:
    """The entries of ``stage``'s cache left, in order, when ``slots`` are dropped."""
    gone = set(slots)
    if min(gone) < 0 or max(gone) >= stage.length:
        raise ConfigError(
            f"stage {stage.start}-{stage.stop} holds {stage.length} tokens, asked to drop {max(gone)}"
        )
    return [i for i in range(stage.length) if i not in gone]


class Stage:
    """Layers ``[start, stop)`` of ``model`` (a transformers ``*ForCausalLM``), which this
    stage takes over: the modules it does not need are released."""

    def __init__(self, model: Any, start: int, stop: int, *, n_layers: int | None = None) -> None:
        """``model`` is whole and is pruned here; or, with ``n_layers`` (the whole model's
        count), it holds only layers ``[start, stop)`` already (``load``)."""
        if n_layers is None:
            n_layers = layer_count(model.config)
            keep_layers(model, start, stop)
        self.start, self.stop, self.n_layers = start, stop, n_layers
        self.first, self.last = start == 0, stop == n_layers
        self.model = model
        self.config = model.config
        self.cache: Any = None
        self.labels: list[int] = []  # per cache entry: -1 shared, b: outline point b's own
        self.slot = 0  # the request whose cache ``cache`` is (several in the pipeline at once)
        self._parked: dict[int, tuple[Any, list[int]]] = {}  # the other requests' caches
        self.reset()

    @classmethod
    def load(cls, folder: str | Path, start: int, stop: int) -> Stage:
        """Layers ``[start, stop)`` of the checkpoint in ``folder``, read alone: the device
        holds only this stage's weights."""
        model, n_layers = load_layer_range(folder, start, stop)
        return cls(model, start, stop, n_layers=n_layers)

    def reset(self) -> None:
        self.slot, self._parked = 0, {}
        self._empty()

    def _empty(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()  # every layer keeps every entry, so that it can roll back
        self.labels = []

    def use(self, slot: int, *, fresh: bool = False) -> None:
        """Work on request ``slot``'s cache from now on (``fresh``: an empty one, the slot's
        new request), the current one parked: several requests in the pipeline at once,
        each with its own cache in every stage."""
        if slot != self.slot:
            self._parked[self.slot] = (self.cache, self.labels)
            self.cache, self.labels = self._parked.pop(slot, (None, []))
            self.slot = slot
        if fresh or self.cache is None:
            self._empty()

    @property
    def length(self) -> int:
        """Tokens this stage's cache holds."""
        return int(self.cache.get_seq_length())

    def forward(self, x: Any, position: int, *, logits: str = "all") -> Any:
        """Token ids ``(1, n)`` on the first stage, hidden states ``(1, n, hidden)`` after;
        ``position`` must be the cache's length (the tokens arrive in order). Hidden
        states out; on the last stage logits: ``(1, n, vocab)`` for ``logits="all"``,
        ``(1, 1, vocab)`` of the last token for ``"last"``, its hidden state ``(hidden,)`` for
        ``"hidden"``, or None for ``"none"`` (a prompt's sub-sequence before its last
        needs only the cache)."""
        import torch

        if position != self.length:
            raise ConfigError(
                f"stage {self.start}-{self.stop} holds {self.length} tokens, got position {position}"
            )
        n = int(x.shape[1])
        x, positions = self._on_device(x, torch.arange(position, position + n).unsqueeze(0))
        self.labels.extend([-1] * n)
        with torch.inference_mode():
            kwargs: dict[str, Any] = {"input_ids": x} if self.first else {"inputs_embeds": x}
            out = self.model.model(
                **kwargs, position_ids=positions, past_key_values=self.cache, use_cache=True
            )
        return forward_output(self, out.last_hidden_state, logits)

    def forward_tree(self, x: Any, position: int, parents: Sequence[int]) -> Any:
        """A token tree after the cache's ``position`` tokens in one pass (paper 004 §V-A):
        ids ``(1, n)`` on the first stage, hidden states after; node i sits at
        ``position + depth`` and sees the cache, its ancestors and itself. Returns the
        hidden states ``(1, n, hidden)`` (on the last stage after the final norm: ``head``
        turns them into logits)."""

        if position != self.length:
            raise ConfigError(
                f"stage {self.start}-{self.stop} holds {self.length} tokens, got a tree at {position}"
            )
        depths = TokenTree.of([0] * len(parents), parents).depths()
        return self.forward_branches(x, [position + d for d in depths], [-1] * len(parents), parents)

    def _on_device(self, *tensors: Any) -> tuple[Any, ...]:
        """The inputs where the model is (the CPU here; a GPU only in the bench that times
        this stage against ``StaticStage``)."""
        device = next(self.model.parameters()).device
        return tuple(t.to(device) for t in tensors)

    def head(self, hidden: Any) -> Any:
        """The last stage's logits for its hidden states."""
        import torch

        with torch.inference_mode():
            return self.model.lm_head(hidden)

    def choices(self, hidden: Any) -> Any:
        """The greedy choice after each of the last stage's hidden states (n, d): int64 (n,)."""
        return greedy_ids(self.head(hidden))

    def guesses(self, heads: Any, hidden: Any, width: int) -> Any:
        """The draft heads' ``width`` best per head for hidden states (n, d)."""
        return heads.vocab_guesses(hidden, self.model.lm_head, width)

    def commit(self, start: int, nodes: Sequence[int]) -> None:
        """Keep the first ``start`` cached tokens and then the nodes ``nodes`` of the tree
        that followed them: the verified path."""
        commit_tree_path(self.cache, start, nodes)
        self.labels = self.labels[:start] + [self.labels[start + i] for i in nodes]

    def forward_branches(
        self, x: Any, positions: Sequence[int], branches: Sequence[int], parents: Sequence[int]
    ) -> Any:
        """New nodes of several branches in one pass (outline decoding, paper 004 §V-B: the
        points share the prompt's cache and go through the stage together): node i sits at
        ``positions[i]``, belongs to ``branches[i]`` (-1: shared) and sees the shared
        cache, its branch's own entries and its ``parents`` chain among the new nodes.
        Returns the hidden states ``(1, n, hidden)`` (``head`` gives the last stage's
        logits)."""
        import torch

        if (
            len(positions) != int(x.shape[1])
            or len(branches) != len(positions)
            or len(parents) != len(positions)
        ):
            raise ConfigError(f"{int(x.shape[1])} nodes need as many positions, branches and parents")
        mask = branch_attention_mask(self.labels, branches, parents, self.model.dtype)
        x, at, mask = self._on_device(x, torch.tensor([list(positions)]), mask)
        self.labels.extend(int(b) for b in branches)
        with torch.inference_mode():
            kwargs: dict[str, Any] = {"input_ids": x} if self.first else {"inputs_embeds": x}
            out = self.model.model(
                **kwargs,
                position_ids=at,
                attention_mask=mask,
                past_key_values=self.cache,
                use_cache=True,
            )
        return out.last_hidden_state

    def drop(self, slots: Sequence[int]) -> None:
        """Forget the cache entries ``slots`` (a branch's rejected guesses, a finished phase)."""
        if not slots:
            return
        keep = entries_kept(self, slots)
        keep_cache_slots(self.cache, keep)
        self.labels = [self.labels[i] for i in keep]

    def release(self) -> None:
        """Free the weights and the cache now (a process that loads another stage next
        would otherwise hold both at its peak)."""
        self.model = None
        self.cache = None

    def truncate(self, length: int) -> None:
        """Forget every token from ``length`` on."""
        if length < self.length:
            self.cache.crop(length - self.length)  # this transformers crops by a negative count
        del self.labels[length:]
