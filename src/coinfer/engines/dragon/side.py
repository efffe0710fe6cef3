"""One side's Decoder (paper 003, §3): its retrieved documents decoded together, one
sequence each, and their next-token distributions mixed.

Each document d gets its own sequence on the side's model: the document, then the query
(``prompt_for(d)``), then the text generated so far. One batched forward per token
(``extend_many``) lengthens all of them; ``distribution`` mixes their next-token
distributions by the softmax of the documents' relevance scores (``local_mixture``) and
keeps only the head that would travel (``sparsify``), so the side drafts from exactly
what the other side will see. ``sync`` rolls every sequence back to the accepted text
(a rejected draft, Algorithm 1's step 4) and reads what it lacks.

The documents never leave this object: what a side shows the other is a token, its
sparse distribution and ``log h`` (``Draft``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from coinfer.decoding.drafters import common_prefix
from coinfer.decoding.sampling import SamplingParams, probs_from_logits, sample_at
from coinfer.engines.dragon.aggregation import local_mixture
from coinfer.engines.dragon.doccache import DocumentCache
from coinfer.errors import ConfigError
from coinfer.models.base import Seq, SteerableModel
from coinfer.transport.sparse import SparseDistribution, sparsify

__all__ = ["CLOUD", "DEVICE", "Document", "Draft", "RagSide", "Rescore", "document_prompt", "draw"]

DEVICE, CLOUD = 0, 1  # a side's number: its stream of draws, its index in per-side pairs


@dataclass(frozen=True)
class Document:
    """A retrieved piece of text and its relevance to the query (a log-weight: the mixture
    weights are the softmax of these over every document of both sides)."""

    name: str
    text: str
    relevance: float


Rescore = Callable[[Sequence[Document], str], np.ndarray]  # (documents, text so far) -> relevance


@dataclass(frozen=True)
class Draft:
    """A side's next token at ``position`` (its index in the generated text), the
    distribution it was drawn from, the side's ``log h`` and how long decoding took."""

    position: int
    token: int
    dist: SparseDistribution
    log_h: float
    decode_s: float


def document_prompt(
    model: SteerableModel, question: str, style: str = "chat"
) -> Callable[[Document], list[int]]:
    """How a document and the question become one sequence's prompt: the document first
    (so its cache can be reused across questions), then the question. ``chat``: the
    document as the system message and the question as the user's, in the model's chat
    template; ``text``: the document's text, a blank line, then the question's (language
    modelling)."""

    def chat(doc: Document) -> list[int]:
        return model.user_prompt(
            question, system=f"Use this document where it helps to answer.\n\n{doc.text}"
        )

    def text(doc: Document) -> list[int]:
        return model.text_prompt(f"{doc.text}\n\n{question}")

    return chat if style == "chat" else text


def draw(seed: int, position: int, side: int) -> float:
    """The uniform a side samples its draft at ``position`` with (one stream per side)."""
    return float(np.random.default_rng([seed, position, side]).random())


class RagSide:
    """The documents of one side on ``model``; ``side`` (0 device, 1 cloud) picks its
    stream of draws. With ``rescore`` the weights are dynamic (§4): every
    ``rescore_every`` tokens the documents' relevance is re-scored against the text so
    far (a function of the agreed text alone, so both sides' text stays deterministic).
    ``share``: how many answers decode on ``model`` at once (a server's), each given an
    equal part of a shared cache's cells."""

    def __init__(
        self,
        model: SteerableModel,
        documents: Sequence[Document],
        prompt_for: Callable[[Document], list[int]],
        *,
        sampling: SamplingParams,
        seed: int,
        side: int,
        transfer_top_p: float = 0.95,
        transfer_max_ids: int = 256,
        rescore: Rescore | None = None,
        rescore_every: int = 16,
        cache: DocumentCache | None = None,
        share: int = 1,
    ) -> None:
        if not documents:
            raise ConfigError("a side needs at least one document", hint="retrieve with top_k >= 1")
        if model.max_sequences is not None and len(documents) > model.max_sequences - model.live_sequences:
            raise ConfigError(
                f"{model.name} has room for {model.max_sequences - model.live_sequences} sequences, "
                f"not {len(documents)} documents",
                hint="retrieve fewer documents per side (--top-k)",
            )
        self.model, self.documents = model, list(documents)
        self.sampling, self.seed, self.side = sampling, seed, side
        # what is mixed: the request's distribution, or the model's own (temperature 1) when greedy
        self._mixed = SamplingParams(temperature=1.0) if sampling.greedy else sampling
        self.transfer = (transfer_top_p, transfer_max_ids)
        self.relevance = np.array([d.relevance for d in documents], dtype=np.float64)
        self.rescore, self.rescore_every = rescore, rescore_every
        self.cache, self.share = cache, max(1, share)
        self._rescored: tuple[tuple[int, ...], np.ndarray] | None = None
        self.prefixes = [prompt_for(d) for d in self.documents]
        self.generated: list[int] = []
        self._seqs: list[Seq] = []
        self._rows: np.ndarray | None = None  # (n_docs, vocab) logits after the generated text
        self.forward_s = 0.0  # the last forward's seconds

    # ---- the sequences ----------------------------------------------------------------
    def start(self) -> float:
        """Prefill every document's sequence (one batch; with a ``cache``, only what no
        earlier answer read); the seconds it took."""
        t0 = time.perf_counter()
        if self.cache is None:
            items = [(self.model.new_sequence(), p) for p in self.prefixes]
        else:
            items = self.cache.open(self.prefixes)
        self._seqs = [seq for seq, _ in items]
        rows = self.model.extend_many(items, last_only=True)
        if self.cache is not None:
            self.cache.keep(self.prefixes, self._seqs)
        self._rows = np.stack([r[-1] for r in rows])
        self.forward_s = time.perf_counter() - t0
        return self.forward_s

    def room(self) -> int:
        """How many tokens an answer may have before the documents' sequences fill the
        model's window: each sequence's own ``n_ctx``, or, where all sequences share the
        cells (llama.cpp's unified cache), an equal share of what their prompts leave of
        this answer's part of the cells the document cache does not keep."""
        if self.model.kv_cells_shared:
            kept = self.cache.cells if self.cache is not None else 0
            left = (self.model.n_ctx - kept) // self.share - sum(len(p) for p in self.prefixes)
            return max(0, left // max(1, len(self.prefixes)))
        return max(0, self.model.n_ctx - max(len(p) for p in self.prefixes))

    @property
    def started(self) -> bool:
        return self._rows is not None

    def advance(self, token: int) -> None:
        """Append ``token`` to the generated text and decode it in every sequence."""
        self.sync([*self.generated, token])

    def sync(self, text: Sequence[int]) -> None:
        """Make the generated text ``text``: roll every sequence back to the common part
        and decode the rest (nothing when it already is)."""
        text = list(text)
        if text == self.generated and self._rows is not None:
            return
        t0 = time.perf_counter()
        if text:
            keep = min(common_prefix(self.generated, text), len(text) - 1)
            items = [(s, text[keep:]) for s in self._seqs]
            ends = [len(p) + keep for p in self.prefixes]
        else:  # back to the prompt's end: re-read each prompt's last token
            items = [(s, p[-1:]) for s, p in zip(self._seqs, self.prefixes, strict=True)]
            ends = [len(p) - 1 for p in self.prefixes]
        for seq, end in zip(self._seqs, ends, strict=True):
            self.model.truncate(seq, end)
        rows = self.model.extend_many(items, last_only=True)
        self._rows = np.stack([r[-1] for r in rows])
        self.generated = text
        self.forward_s = time.perf_counter() - t0

    def close(self) -> None:
        for seq in self._seqs:
            self.model.release(seq)
        self._seqs = []

    # ---- the distribution ------------------------------------------------------------
    def distribution(self) -> tuple[SparseDistribution, float]:
        """The side's next-token distribution after the generated text (the head that
        travels) and its ``log h``."""
        if self._rows is None:
            raise ConfigError("start() the side before asking for its distribution")
        probs = np.stack([probs_from_logits(row, self._mixed) for row in self._rows])
        p, log_h = local_mixture(probs, self.current_relevance())
        return sparsify(p, *self.transfer), log_h

    def current_relevance(self) -> np.ndarray:
        """The documents' relevance for the next token: as retrieved, or (dynamic weights)
        re-scored against the generated text up to the last multiple of ``rescore_every``."""
        if self.rescore is None or self.rescore_every <= 0:
            return self.relevance
        upto = len(self.generated) // self.rescore_every * self.rescore_every
        if upto == 0:
            return self.relevance
        text = tuple(self.generated[:upto])
        if self._rescored is None or self._rescored[0] != text:
            scores = np.asarray(
                self.rescore(self.documents, self.model.detokenize(list(text))), dtype=np.float64
            )
            self._rescored = (text, scores)
        return self._rescored[1]

    def draft(self) -> Draft:
        """The side's next token, drawn from its own distribution (its most likely when
        greedy); ``decode_s`` counts the last forward and the mixing."""
        t0 = time.perf_counter()
        dist, log_h = self.distribution()
        position = len(self.generated)
        if self.sampling.greedy:
            token = int(dist.ids[int(np.argmax(dist.probs))])
        else:
            token = sample_at(dist.dense(), draw(self.seed, position, self.side))
        return Draft(position, token, dist, log_h, self.forward_s + time.perf_counter() - t0)
