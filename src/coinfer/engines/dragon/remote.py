"""The device-cloud link of DRAGON: the cloud's service and the device's handshake.

The device opens one stream per answer and sends ``Hello``: the question and how to
decode (never its documents). The cloud checks that both sides share one vocabulary,
retrieves its own top-k documents for the question, reads them, and answers ``Ready``
with how long the answer may be; then both run a ``Peer`` on the stream. The cloud
answers up to ``max_answers`` streams at once, each on its own thread, its model shared
as a ``SharedModel`` (a llama.cpp context is not safe to share between threads; the
answers' forwards are merged into one batch per step); further streams wait their turn
within their deadlines.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

from coinfer.decoding.sampling import SamplingParams
from coinfer.engines.dragon.config import MAX_LOOKAHEAD, DragonConfig, Retrieval
from coinfer.engines.dragon.doccache import DocumentCache
from coinfer.engines.dragon.pipeline import Peer
from coinfer.engines.dragon.scheduler import LiveScheduler
from coinfer.engines.dragon.side import CLOUD, Document, RagSide, Rescore, document_prompt
from coinfer.errors import ConfigError, TransportError
from coinfer.models.base import SteerableModel
from coinfer.models.shared import SharedModel
from coinfer.transport.link import Stream, Tls, envelope_type

__all__ = ["CloudLink", "CloudService", "config_from_hello", "hello", "tokenizer_digest"]

log = logging.getLogger(__name__)

VERSION = 2  # 2: drafts name their parent token; both sides may aggregate
_PROBE = "def f(x):\n    return x * 2  # ünïcode 🙂 The quick brown fox."


def tokenizer_digest(model: SteerableModel) -> bytes:
    """A fingerprint of the model's vocabulary: both sides must tokenize alike."""
    ids = ",".join(map(str, model.tokenize(_PROBE)))
    return hashlib.sha256(f"{model.vocab_size}:{ids}".encode()).digest()


@dataclass(frozen=True, kw_only=True)
class CloudLink:
    """Where the cloud is and how to talk to it: ``address`` host:port, ``token`` the
    shared secret, ``deadline_s`` the most one answer's stream may last, ``idle_s`` the
    most to wait for the cloud's next draft or decision before finishing on the device
    alone. How the two sides aggregate is the answer's (``DragonConfig``'s ``aggregator``
    and ``lookahead``)."""

    address: str
    token: str
    tls: Tls | None = None
    deadline_s: float = 600.0
    idle_s: float = 10.0

    def __post_init__(self) -> None:
        host, _, port = self.address.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(
                f"--cloud wants HOST:PORT, got {self.address!r}", hint="e.g. --cloud 127.0.0.1:50071"
            )
        if not self.token:
            raise ConfigError("no token for the cloud link", hint="set COINFER_LINK_TOKEN on both sides")
        if self.idle_s <= 0 or self.deadline_s <= 0:
            raise ConfigError("the cloud link's timeouts must be positive")


def hello(
    model: SteerableModel,
    question: str,
    config: DragonConfig,
    link: CloudLink,
    *,
    seed: int,
    prompt_style: str,
) -> Any:
    """The device's first message (sent before the device has retrieved: the answer's
    length is agreed in ``Ready``, and the device may end it sooner at its own limit)."""
    s = config.sampling
    return envelope_type()(
        hello={
            "version": VERSION,
            "question": question,
            "top_k": config.top_k,
            "temperature": s.temperature,
            "sampling_top_k": s.top_k,
            "sampling_top_p": s.top_p,
            "seed": seed,
            "max_tokens": config.max_tokens,
            "prompt_style": prompt_style,
            "vocab_size": model.vocab_size,
            "tokenizer_digest": tokenizer_digest(model),
            "cloud_aggregates": config.aggregator == "cloud",
            "transfer_top_p": config.transfer_top_p,
            "transfer_max_ids": config.transfer_max_ids,
            "retrieval": config.retrieval,
            "relevance_temperature": config.relevance_temperature,
            "chunk_chars": config.chunk_chars,
            "lookahead": config.lookahead,
            "scheduled": config.aggregator == "auto",
            "rescore_every": config.rescore_every,
            "both_aggregate": config.aggregator == "both",
        }
    )


def config_from_hello(h: Any) -> DragonConfig:
    """The device's settings, validated as if given here (``ConfigError`` otherwise)."""
    sampling = SamplingParams(
        temperature=h.temperature, top_k=h.sampling_top_k, top_p=h.sampling_top_p or 1.0
    )
    return DragonConfig(
        max_tokens=max(1, h.max_tokens),
        sampling=sampling,
        top_k=h.top_k,
        chunk_chars=h.chunk_chars or 400,
        retrieval=h.retrieval or "fused",
        relevance_temperature=h.relevance_temperature or 0.1,
        transfer_top_p=h.transfer_top_p or 0.95,
        transfer_max_ids=h.transfer_max_ids or 256,
        rescore_every=h.rescore_every,
        seed=h.seed,
    )


class Retrieves(Protocol):
    """What the cloud needs of its corpus (``Corpus``)."""

    def retrieve(self, query: str, k: int, *, how: Retrieval, temperature: float) -> list[Document]: ...

    def rescorer(self, question: str, *, temperature: float) -> Rescore: ...


class CloudService:
    """The cloud's side of every stream: its model and its corpus; ``max_answers``
    streams answered at once, each with its share of the model's cells."""

    def __init__(
        self,
        model: SteerableModel,
        corpus: Retrieves,
        *,
        hello_timeout_s: float = 30.0,
        idle_s: float = 30.0,
        keep_documents: bool = True,
        max_answers: int = 1,
    ) -> None:
        if max_answers < 1:
            raise ConfigError(
                f"max_answers must be at least 1, got {max_answers}",
                hint="coinfer rag cloud --max-batch N, with N >= 1",
            )
        self.model = SharedModel(model) if max_answers > 1 else model
        self.corpus, self.max_answers = corpus, max_answers
        self.cache = DocumentCache(self.model) if keep_documents else None
        self.hello_timeout_s, self.idle_s = hello_timeout_s, idle_s
        self._answering = threading.BoundedSemaphore(max_answers)

    def serve(self, stream: Stream) -> None:
        message = stream.recv(timeout=self.hello_timeout_s)
        if message is None or message.WhichOneof("body") != "hello":
            raise TransportError("a stream did not open with Hello")
        h = message.hello
        config = self._accept(h)
        if isinstance(config, str):
            stream.send(envelope_type()(ready={"refused": config}))
            log.warning("refused a stream: %s", config)
            return
        with self._answering:
            self._answer(stream, h, config)

    def _accept(self, h: Any) -> DragonConfig | str:
        """The device's settings, or why this cloud refuses them."""
        if h.version != VERSION:
            return f"protocol version {h.version}; this cloud speaks {VERSION}"
        if h.vocab_size != self.model.vocab_size or h.tokenizer_digest != tokenizer_digest(self.model):
            return f"the device's vocabulary differs from the cloud model's ({self.model.name})"
        try:
            return config_from_hello(h)
        except ConfigError as exc:
            return str(exc).splitlines()[0]

    def _answer(self, stream: Stream, h: Any, config: DragonConfig) -> None:
        docs = self.corpus.retrieve(
            h.question, config.top_k, how=config.retrieval, temperature=config.relevance_temperature
        )
        side = RagSide(
            self.model,
            docs,
            document_prompt(self.model, h.question, h.prompt_style or "chat"),
            sampling=config.sampling,
            seed=h.seed,
            side=CLOUD,
            transfer_top_p=config.transfer_top_p,
            transfer_max_ids=config.transfer_max_ids,
            rescore=self.corpus.rescorer(h.question, temperature=config.relevance_temperature),
            rescore_every=config.rescore_every,
            cache=self.cache,
            share=self.max_answers,
        )
        try:
            t0 = time.perf_counter()
            side.start()
            max_tokens = min(config.max_tokens, side.room())
            stream.send(
                envelope_type()(
                    ready={
                        "documents": len(docs),
                        "prefill_s": time.perf_counter() - t0,
                        "max_tokens": max_tokens,
                    }
                )
            )
            peer = Peer(
                side,
                CLOUD,
                aggregates=h.cloud_aggregates,
                stream=stream,
                sampling=config.sampling,
                seed=h.seed,
                max_tokens=max_tokens,
                stop_ids=self.model.eos_ids,
                lookahead=min(h.lookahead, MAX_LOOKAHEAD),
                schedule=LiveScheduler() if h.scheduled else None,
                both=h.both_aggregate,
            )
            peer.run(idle_timeout=self.idle_s)
        finally:
            side.close()
