"""DRAGON's engine (paper 003): retrieval-augmented generation by output aggregation.

Every retrieved document is read with the question in a sequence of its own, and each
next token comes from the mixture of the documents' next-token distributions, weighted
by the softmax of their relevance (REPLUG; §2.2). With only the device's documents this
is device-only RAG (``coinfer rag ask`` without ``--cloud``). Given a ``CloudLink``, the
cloud's documents join the same mixture through Speculative Aggregation (``Peer``): the
device sends the question, never its documents.

Time to first token counts from the question: with a cloud, the device sends its
``Hello`` first and then retrieves and reads its own documents (``documents`` may be a
callable that retrieves them), so the cloud's retrieval and prefill run alongside the
device's; a ``Channel`` kept across answers (``open_channel``) spares each answer the
connection's handshake.

When the link fails mid-answer (the cloud killed, the network cut, a cloud silent for
``idle_s``), the device finishes the answer on its own documents from the text agreed so
far, logs a warning, and says so in ``extras["fallback"]``; the next answer tries the
cloud again.

Three layers, as every engine: ``generate_tokens`` yields the tokens as they are
decided, ``stream`` turns them into ``Response`` objects, ``generate`` blocks.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

from coinfer.decoding.learned import Learned, learned_or_new
from coinfer.decoding.response import Responder, Response, collect
from coinfer.decoding.sampling import PositionDraws
from coinfer.engines.dragon.config import DragonConfig
from coinfer.engines.dragon.doccache import DocumentCache
from coinfer.engines.dragon.pipeline import Peer
from coinfer.engines.dragon.remote import CloudLink, hello
from coinfer.engines.dragon.scheduler import LiveScheduler
from coinfer.engines.dragon.side import CLOUD, DEVICE, Document, RagSide, Rescore, document_prompt
from coinfer.errors import ConfigError, TransportError
from coinfer.models.base import SteerableModel
from coinfer.transport.link import Channel, Stream

__all__ = ["Documents", "generate", "generate_tokens", "open_channel", "stream"]

log = logging.getLogger(__name__)

Step = tuple[list[int], str | None]  # tokens decided, and why the answer ends there (or None)
Documents = Sequence[Document] | Callable[[], Sequence[Document]]  # given, or retrieved when needed


def open_channel(link: CloudLink) -> Channel:
    """A connection to the cloud, started now and kept for as many answers as the caller
    likes (pass it as ``channel``); close it when done."""
    return Channel(link.address, tls=link.tls)


def generate_tokens(
    model: SteerableModel,
    question: str,
    *,
    documents: Documents,
    config: DragonConfig = DragonConfig(),  # noqa: B008  (frozen, so a shared default is safe)
    cloud: CloudLink | None = None,
    channel: Channel | None = None,
    prompt_style: str = "chat",
    rescore: Rescore | None = None,
    report: dict[str, Any] | None = None,
    learned: Learned | None = None,
) -> Iterator[Step]:
    """Yield the answer's tokens as they are decided, with why it ends (None until then):
    "stop" at an end-of-generation token (not output), "length" at ``max_tokens`` or a
    full window. ``rescore`` (e.g. ``Corpus.rescorer(question)``) makes the device's
    weights dynamic (``config.rescore_every``). ``report`` (a dict) receives what the
    extras show: the mode, the cloud's documents and acceptance, bytes sent, a fallback's
    reason. ``learned``: where the device's document caches are kept (a session's; None:
    this call's alone)."""
    own = learned is None
    learned = learned_or_new(learned)
    try:
        yield from _decode(
            model, question, documents, config, cloud, channel, prompt_style, rescore,
            report if report is not None else {}, _document_cache(model, config, learned),
        )  # fmt: skip
    finally:
        if own:  # a call's own document caches end with it
            learned.close()


def _decode(
    model: SteerableModel,
    question: str,
    documents: Documents,
    config: DragonConfig,
    cloud: CloudLink | None,
    channel: Channel | None,
    prompt_style: str,
    rescore: Rescore | None,
    report: dict[str, Any],
    cache: DocumentCache | None,
) -> Iterator[Step]:
    """``generate_tokens`` with the document caches chosen."""
    seed = PositionDraws(config.sampling.seed if config.seed is None else config.seed).seed
    report.update(mode="device-only")
    if cloud is None:
        side = _device_side(model, question, documents, config, seed, prompt_style, rescore, report, cache)
        try:
            side.start()
            yield from _device_alone(side, [], min(config.max_tokens, side.room()))
        finally:
            side.close()
        return
    yield from _with_cloud(
        model, question, documents, config, cloud, channel, seed, prompt_style, rescore, report, cache
    )


def _document_cache(model: SteerableModel, config: DragonConfig, learned: Learned) -> DocumentCache | None:
    """The device's documents' caches kept across answers (``keep_documents``), or None."""
    if not config.keep_documents:
        return None
    return learned.of(model, "documents", lambda: DocumentCache(model))


def _device_side(
    model: SteerableModel,
    question: str,
    documents: Documents,
    config: DragonConfig,
    seed: int,
    prompt_style: str,
    rescore: Rescore | None,
    report: dict[str, Any],
    cache: DocumentCache | None,
) -> RagSide:
    """The device's Decoder over its documents (retrieved now when ``documents`` is a
    callable)."""
    docs = list(documents() if callable(documents) else documents)
    report["documents"] = [d.name for d in docs]
    side = RagSide(
        model,
        docs,
        document_prompt(model, question, prompt_style),
        sampling=config.sampling,
        seed=seed,
        side=DEVICE,
        transfer_top_p=config.transfer_top_p,
        transfer_max_ids=config.transfer_max_ids,
        rescore=rescore,
        rescore_every=config.rescore_every,
        cache=cache,
        share=config.max_batch,
    )
    report["prompt_tokens"] = sum(len(p) for p in side.prefixes)  # every document's prompt, read
    return side


def _device_alone(side: RagSide, text: list[int], max_tokens: int) -> Iterator[Step]:
    """The device's own mixture from ``text`` on: one token per forward."""
    text = list(text)
    side.sync(text)
    while True:
        if len(text) >= max_tokens:  # resumed at the limit
            yield [], "length"
            return
        token = side.draft().token
        if token in side.model.eos_ids:
            yield [], "stop"
            return
        text.append(token)
        if len(text) >= max_tokens:
            yield [token], "length"
            return
        yield [token], None
        side.advance(token)


def _with_cloud(
    model: SteerableModel,
    question: str,
    documents: Documents,
    config: DragonConfig,
    link: CloudLink,
    channel: Channel | None,
    seed: int,
    prompt_style: str,
    rescore: Rescore | None,
    report: dict[str, Any],
    cache: DocumentCache | None,
) -> Iterator[Step]:
    own = channel is None
    channel = channel or open_channel(link)
    stream = channel.stream(token=link.token, deadline_s=link.deadline_s)
    try:
        # the Hello first: the cloud retrieves and reads its documents while the device does
        sent: TransportError | None = None
        try:
            stream.send(hello(model, question, config, link, seed=seed, prompt_style=prompt_style))
        except TransportError as exc:
            sent = exc
        side = _device_side(model, question, documents, config, seed, prompt_style, rescore, report, cache)
        try:
            yield from _together(side, stream, sent, config, link, seed, report)
        finally:
            side.close()
    finally:
        stream.close()
        if own:
            channel.close()


def _together(
    side: RagSide,
    stream: Stream,
    sent: TransportError | None,
    config: DragonConfig,
    link: CloudLink,
    seed: int,
    report: dict[str, Any],
) -> Iterator[Step]:
    """Speculative Aggregation with the cloud; on a failed link, the device alone from the
    text agreed so far."""
    model = side.model
    max_tokens = min(config.max_tokens, side.room())
    text: list[int] = []
    try:
        if sent is not None:
            raise sent
        side.start()
        max_tokens = min(max_tokens, _ready(stream, link, report))
        peer = Peer(
            side,
            DEVICE,
            aggregates=config.aggregator != "cloud",
            stream=stream,
            sampling=config.sampling,
            seed=seed,
            max_tokens=max_tokens,
            stop_ids=model.eos_ids,
            lookahead=config.lookahead,
            schedule=LiveScheduler() if config.aggregator == "auto" else None,
            both=config.aggregator == "both",
        )
        report.update(mode="dragon", aggregator=config.aggregator)
        for step in _follow(peer, link.idle_s, report):
            text += step[0]
            yield step
        stream.finish(timeout=link.idle_s)  # the last decision and Done reach the cloud
        return
    except TransportError as exc:
        if "UNAUTHENTICATED" in str(exc):  # a user's mistake, not a fault to ride out
            raise ConfigError(
                "the cloud refused this device's token", hint="set the same COINFER_LINK_TOKEN on both sides"
            ) from exc
        stream.close()
        report["fallback"] = f"finished on the device alone: {exc}"
        log.warning(
            "the cloud link failed after %d tokens (%s); finishing on the device alone", len(text), exc
        )
    report.pop("decision", None)  # the device's tokens from here are its own
    if not side.started:
        side.start()
    yield from _device_alone(side, text, max_tokens)


def _ready(stream: Stream, link: CloudLink, report: dict[str, Any]) -> int:
    """The cloud's ``Ready``: how long the answer may be, waited for at most ``idle_s``
    once the device has read its own documents. ``ConfigError`` when it refused."""
    message = stream.recv(timeout=link.idle_s)
    if message is None or message.WhichOneof("body") != "ready":
        raise TransportError("the cloud did not get ready in time")
    ready = message.ready
    if ready.refused:
        raise ConfigError(
            f"the cloud refused the request: {ready.refused}", hint="run the same model family on both sides"
        )
    report["cloud_documents"] = ready.documents
    return int(ready.max_tokens)


def _follow(peer: Peer, idle_s: float, report: dict[str, Any]) -> Iterator[Step]:
    """Run the peer on a thread and yield its tokens as they are decided."""
    decided: queue.Queue[tuple[int, tuple[bool, bool]] | None] = queue.Queue()
    peer.on_token = lambda token, accepted: decided.put((token, accepted))
    failure: list[BaseException] = []

    def run() -> None:
        try:
            peer.run(idle_timeout=idle_s)
        except BaseException as exc:
            failure.append(exc)
        finally:
            decided.put(None)

    runner = threading.Thread(target=run, name="dragon-device", daemon=True)
    runner.start()
    emitted = 0
    try:
        while (item := decided.get()) is not None:
            token, accepted = item
            report["decision"] = {"device": accepted[DEVICE], "cloud": accepted[CLOUD]}
            emitted += 1
            if token in peer.stop_ids:
                _record(peer, report)
                yield [], "stop"
                return
            last = emitted >= peer.max_tokens
            if last:
                _record(peer, report)
            yield [token], "length" if last else None
            if last:
                return
    finally:
        peer.stop()
        runner.join(timeout=30)
        _record(peer, report)
    if failure:
        raise failure[0]


def _record(peer: Peer, report: dict[str, Any]) -> None:
    report.update(
        accepted={"device": peer.stats.accepted[0], "cloud": peer.stats.accepted[1]},
        rejected={"device": peer.stats.rejected[0], "cloud": peer.stats.rejected[1]},
        bytes_sent=peer.stats.bytes_sent,
        stale_drafts=peer.stats.stale,
        handovers=peer.stats.handovers,
    )


def _drafts_held(report: dict[str, Any]) -> tuple[int, int]:
    """This token's aggregation: (drafts it weighed, drafts it kept), both sides' counted;
    (0, 0) where the device decoded alone."""
    decision = report.get("decision")
    if not decision:
        return 0, 0
    return len(decision), sum(bool(v) for v in decision.values())


def stream(
    model: SteerableModel,
    question: str,
    *,
    documents: Documents,
    config: DragonConfig = DragonConfig(),  # noqa: B008
    cloud: CloudLink | None = None,
    channel: Channel | None = None,
    prompt_style: str = "chat",
    rescore: Rescore | None = None,
    learned: Learned | None = None,
) -> Generator[Response, None, None]:
    """One ``Response`` per decided token; ``extras`` holds the mode ("dragon" or
    "device-only"), the documents, the drafts each side had accepted and rejected, the
    bytes the device sent, ``prompt_tokens`` (every document's prompt the device read, as
    in the stats), ``decision`` (whose draft this token's aggregation accepted:
    ``{"device": bool, "cloud": bool}``, absent where the device decoded alone) and, after
    a failed link, ``fallback``."""
    out = Responder(model.detokenize, prompt_tokens=0, eos_ids=model.eos_ids)
    report: dict[str, Any] = {}
    steps = generate_tokens(
        model,
        question,
        documents=documents,
        config=config,
        cloud=cloud,
        channel=channel,
        prompt_style=prompt_style,
        rescore=rescore,
        report=report,
        learned=learned,
    )
    for tokens, finished in steps:
        drafted, accepted = _drafts_held(report)
        out.stats.prompt_tokens = report.get("prompt_tokens", 0)
        yield out.step(tokens, drafted=drafted, accepted=accepted, finish=finished, extras=dict(report))


def generate(
    model: SteerableModel,
    question: str,
    *,
    documents: Documents,
    config: DragonConfig = DragonConfig(),  # noqa: B008
    cloud: CloudLink | None = None,
    channel: Channel | None = None,
    prompt_style: str = "chat",
    rescore: Rescore | None = None,
    learned: Learned | None = None,
) -> Response:
    """Generate to the end: one ``Response`` with the whole text and every token."""
    return collect(
        stream(
            model,
            question,
            documents=documents,
            config=config,
            cloud=cloud,
            channel=channel,
            prompt_style=prompt_style,
            rescore=rescore,
            learned=learned,
        ),
        model.detokenize,
    )
