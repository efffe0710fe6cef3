"""DRAGON's knobs (paper 003), validated when made."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from coinfer.decoding.sampling import SamplingParams
from coinfer.decoding.speculative import check_budget
from coinfer.errors import ConfigError

__all__ = ["AGGREGATORS", "MAX_LOOKAHEAD", "DragonConfig"]

Retrieval = Literal["bm25", "dense", "fused"]
Aggregator = Literal["device", "cloud", "auto", "both"]
AGGREGATORS = ("device", "cloud", "auto", "both")
MAX_LOOKAHEAD = 64


@dataclass(frozen=True, kw_only=True)
class DragonConfig:
    """``top_k``: documents each side retrieves from its own corpus (the paper's top-2 per
    side for latency, up to 16 for perplexity); ``chunk_chars``: their size;
    ``retrieval``: how a side ranks its chunks (BM25, MiniLM embeddings, or both fused by
    reciprocal rank); ``relevance_temperature``: the mixture weight of a document is the
    softmax of its embedding similarity to the query over this (the two sides' weights
    are comparable only on one scale, so weights always come from the embeddings);
    ``transfer_top_p`` / ``transfer_max_ids``: the head of a side's distribution that
    travels (§7.1; 0.8 in the paper, 0.95 here so that greedy text rarely depends on it);
    ``rescore_every``: dynamic weights (§4), each document's relevance re-scored against
    the text so far every this many tokens (0: the weights of retrieval throughout);
    ``keep_documents``: keep the device's documents' KV caches across answers of one
    session (``DocumentCache``, in the session's ``Learned``; they stay live sequences
    of the model until evicted or the session closes); ``seed``: the draws of sampled
    decoding (None: a random one); with a cloud, ``aggregator``: the side that aggregates
    (§5; "both": each side on its own copy, the fastest measured; "auto": the device
    first, then the side the live scheduler prefers; "device" or "cloud": fixed, the
    paper's baselines) and ``lookahead``: how far a side drafts ahead of the accepted text
    (0: token-wise synchronous aggregation, DRDG/TW); ``max_batch``: questions a session
    (a server's) answers at once, each on its own thread, the device's forwards of all of
    them merged into one batch (each answer's room is its share of the model's cells).
    """

    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    top_k: int = 2
    chunk_chars: int = 400
    retrieval: Retrieval = "fused"
    relevance_temperature: float = 0.1
    transfer_top_p: float = 0.95
    transfer_max_ids: int = 256
    rescore_every: int = 16
    keep_documents: bool = False
    seed: int | None = None
    aggregator: Aggregator = "both"
    lookahead: int = 8
    max_batch: int = 1

    def __post_init__(self) -> None:
        check_budget(self.max_tokens)
        if self.retrieval not in ("bm25", "dense", "fused"):
            raise ConfigError(f"unknown retrieval {self.retrieval!r}", hint="use bm25, dense or fused")
        if not isinstance(self.top_k, int) or not 1 <= self.top_k <= 32:
            raise ConfigError(f"top_k must be a whole number in 1..32, got {self.top_k!r}")
        if not isinstance(self.chunk_chars, int) or self.chunk_chars < 50:
            raise ConfigError(f"chunk_chars must be at least 50, got {self.chunk_chars!r}")
        t = self.relevance_temperature
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            raise ConfigError(f"relevance_temperature must be a positive number, got {t!r}")
        if not 0 < self.transfer_top_p <= 1:
            raise ConfigError(f"transfer_top_p must be in (0, 1], got {self.transfer_top_p!r}")
        if not isinstance(self.rescore_every, int) or not 0 <= self.rescore_every <= 4096:
            raise ConfigError(f"rescore_every must be in 0..4096, got {self.rescore_every!r}")
        if self.aggregator not in AGGREGATORS:
            raise ConfigError(f"aggregator must be device, cloud, auto or both, got {self.aggregator!r}")
        if not isinstance(self.lookahead, int) or not 0 <= self.lookahead <= MAX_LOOKAHEAD:
            raise ConfigError(
                f"lookahead must be a whole number in 0..{MAX_LOOKAHEAD}, got {self.lookahead!r}"
            )
        if not isinstance(self.max_batch, int) or isinstance(self.max_batch, bool) or self.max_batch < 1:
            raise ConfigError(f"max_batch must be a whole number >= 1, got {self.max_batch!r}")
        if not isinstance(self.transfer_max_ids, int) or not 1 <= self.transfer_max_ids <= 4096:
            raise ConfigError(f"transfer_max_ids must be in 1..4096, got {self.transfer_max_ids!r}")
