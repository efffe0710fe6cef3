"""Speculative Aggregation between a device and a cloud over gRPC on loopback: the text is
the synchronous mixture's whichever side aggregates and however far the sides draft
ahead, and a cloud that vanishes mid-answer leaves the device to finish alone."""

from __future__ import annotations

import importlib.util
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from coinfer.decoding import SamplingParams
from coinfer.engines.dragon import (
    CloudLink,
    CloudService,
    Document,
    DragonConfig,
    RagSide,
    generate,
    open_channel,
)
from coinfer.engines.dragon.aggregation import Uniforms, greedy_aggregate, side_weight, speculative_aggregate
from coinfer.engines.dragon.scheduler import LiveScheduler
from coinfer.models.shared import SharedModel
from coinfer.testing import EOS, ScriptedModel
from coinfer.transport.link import LinkServer

pytestmark = pytest.mark.skipif(importlib.util.find_spec("grpc") is None, reason="needs the net extra")
TOKEN = "test-token"
QUESTION = "?"
LENGTH = 24
PROMPT = 4  # "A\n\n?": the document, a blank line, the question


def _dist(prefix: list[int]) -> Mapping[int, float]:
    """Document "A" (the device's) and "B" (the cloud's) disagree in a pattern that makes
    each side's drafts win sometimes and lose sometimes."""
    i = len(prefix) - PROMPT
    if i >= LENGTH:
        return {EOS: 1.0}
    a = prefix[0] == ord("A")
    step = (i * 7 + sum(prefix[PROMPT:]) % 5) % 3
    if step == 0:
        return {ord("a"): 0.8, ord("b"): 0.2} if a else {ord("b"): 0.55, ord("a"): 0.45}
    if step == 1:
        return {ord("c"): 0.5, ord("d"): 0.5 - 1e-3} if a else {ord("d"): 0.9, ord("c"): 0.1}
    return {ord("e"): 0.6, ord("f"): 0.4} if a else {ord("e"): 0.7, ord("f"): 0.3}


def _model(delay: float = 0.0) -> ScriptedModel:
    def slow(prefix: list[int]) -> Mapping[int, float]:
        time.sleep(delay)
        return _dist(prefix)

    return ScriptedModel(slow if delay else _dist, n_ctx=128)


class _Corpus:
    def retrieve(self, query: str, k: int, *, how: str, temperature: float) -> list[Document]:
        return [Document("B", "B", 0.0)]

    def rescorer(self, question: str, *, temperature: float) -> Callable[..., np.ndarray]:
        return lambda docs, text: np.zeros(len(docs))  # as retrieved: the reference's weights


DEVICE_DOCS = [Document("A", "A", 0.0)]


@pytest.fixture
def cloud() -> Iterator[Callable[..., LinkServer]]:
    servers: list[LinkServer] = []

    def start(delay: float = 0.0) -> LinkServer:
        service = CloudService(_model(delay), _Corpus(), idle_s=5)
        servers.append(LinkServer(service.serve, token=TOKEN).start())
        return servers[-1]

    yield start
    for s in servers:
        s.stop(0)


def _synchronous_reference(
    sampling: SamplingParams = SamplingParams(),  # noqa: B008
    seed: int = 0,
    rescore: Callable[..., np.ndarray] | None = None,
) -> list[int]:
    """Token-wise aggregation in one process: the text Speculative Aggregation must equal."""
    model = _model()
    sides = [
        RagSide(
            model,
            docs,
            lambda d: model.text_prompt(f"{d.text}\n\n{QUESTION}"),
            sampling=sampling,
            seed=seed,
            side=i,
            rescore=rescore,
            rescore_every=4,
        )
        for i, docs in enumerate([DEVICE_DOCS, [Document("B", "B", 0.0)]])
    ]
    for s in sides:
        s.start()
    text: list[int] = []
    while True:
        dev, cl = (s.draft() for s in sides)
        p_dev, p_cl, eta = dev.dist.dense(), cl.dist.dense(), side_weight(dev.log_h, cl.log_h)
        if sampling.greedy:
            out = greedy_aggregate(dev.token, p_dev, cl.token, p_cl, eta)
        else:
            out = speculative_aggregate(dev.token, p_dev, cl.token, p_cl, eta, Uniforms.at(seed, len(text)))
        if out.token == EOS:
            return text
        text.append(out.token)
        for s in sides:
            s.advance(out.token)


def _ask(
    server: LinkServer,
    config: DragonConfig = DragonConfig(max_tokens=64),  # noqa: B008
    *,
    aggregator: str = "both",
    lookahead: int = 8,
) -> object:
    return generate(
        _model(),
        QUESTION,
        documents=DEVICE_DOCS,
        config=replace(config, aggregator=aggregator, lookahead=lookahead),  # type: ignore[arg-type]
        cloud=CloudLink(address=f"127.0.0.1:{server.port}", token=TOKEN, idle_s=5),
        prompt_style="text",
    )


@pytest.mark.parametrize(
    ("aggregator", "lookahead"),
    [("device", 8), ("device", 0), ("cloud", 8), ("cloud", 1), ("both", 8), ("both", 0), ("both", 2)],
)
def test_greedy_text_is_the_synchronous_mixtures(cloud, aggregator: str, lookahead: int) -> None:  # type: ignore[no-untyped-def]
    expected = _synchronous_reference()
    out = _ask(cloud(), aggregator=aggregator, lookahead=lookahead)
    assert out.tokens == expected and out.finish_reason == "stop"  # type: ignore[attr-defined]
    extras = out.extras  # type: ignore[attr-defined]
    assert extras["mode"] == "dragon" and "fallback" not in extras and extras["cloud_documents"] == 1
    accepted, rejected = extras["accepted"], extras["rejected"]
    assert accepted["device"] + rejected["device"] == len(expected) + 1  # every position, the end included
    assert min(accepted.values()) > 0 and min(rejected.values()) > 0  # both sides won and lost
    if lookahead == 0:  # token-wise sync on both sides: no draft ever runs ahead to go stale
        assert extras["stale_drafts"] == 0


def test_a_cloud_that_stops_mid_answer_leaves_the_device_to_finish(cloud) -> None:  # type: ignore[no-untyped-def]
    server = cloud(delay=0.02)
    threading.Timer(0.4, server.stop, args=(0,)).start()
    started = time.monotonic()
    out = _ask(server, aggregator="device", lookahead=4)
    assert "fallback" in out.extras and "device alone" in out.extras["fallback"]  # type: ignore[attr-defined]
    assert out.finish_reason == "stop" and len(out.tokens) == LENGTH  # type: ignore[attr-defined]
    assert time.monotonic() - started < 60  # nothing hung
    assert np.all(np.array(out.tokens) < 256)  # type: ignore[attr-defined]


def test_a_refused_vocabulary_is_a_clear_error(cloud) -> None:  # type: ignore[no-untyped-def]
    from coinfer.errors import ConfigError

    server = cloud()
    other = _model()
    other.vocab_size = 300  # type: ignore[misc]
    with pytest.raises(ConfigError, match="vocabulary"):
        generate(
            other,
            QUESTION,
            documents=DEVICE_DOCS,
            cloud=CloudLink(address=f"127.0.0.1:{server.port}", token=TOKEN),
            prompt_style="text",
        )


@pytest.mark.parametrize(
    ("aggregator", "lookahead"), [("device", 8), ("device", 0), ("cloud", 3), ("both", 8), ("both", 0)]
)
def test_sampled_text_is_the_seeds_whichever_side_aggregates(cloud, aggregator: str, lookahead: int) -> None:  # type: ignore[no-untyped-def]
    sampling = SamplingParams(temperature=1.0)
    expected = _synchronous_reference(sampling, seed=7)
    config = DragonConfig(max_tokens=64, sampling=sampling, seed=7)
    out = _ask(cloud(), config, aggregator=aggregator, lookahead=lookahead)
    assert out.tokens == expected  # type: ignore[attr-defined]


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)])
def test_both_sides_aggregating_agree_when_one_is_slower(cloud, sampling: SamplingParams) -> None:  # type: ignore[no-untyped-def]
    """Symmetric aggregation with a cloud that decodes slower: the device runs ahead and
    the cloud follows, each deciding on its own copy; the text is the seed's."""
    expected = _synchronous_reference(sampling, seed=3)
    config = DragonConfig(max_tokens=64, sampling=sampling, seed=3)
    out = _ask(cloud(delay=0.01), config, aggregator="both", lookahead=4)
    assert out.tokens == expected and "fallback" not in out.extras  # type: ignore[attr-defined]
    assert out.extras["aggregator"] == "both" and out.extras["handovers"] == 0  # type: ignore[attr-defined]


def test_sides_that_disagree_on_the_text_fail_the_link_never_the_answer(cloud, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Each side aggregates on its own copy: should the cloud decide a position otherwise
    (here made to), its next draft names a parent the device did not agree, the link is
    dropped and the device finishes alone, saying so."""
    from coinfer.engines.dragon import pipeline

    real = pipeline.greedy_aggregate

    def cloud_errs(x_a, p_a, x_b, p_b, eta_a):  # type: ignore[no-untyped-def]
        out = real(x_a, p_a, x_b, p_b, eta_a)
        if threading.current_thread().name.startswith("dragon-device"):
            return out
        wrong = ord("f") if out.token != ord("f") else ord("e")
        return pipeline.Aggregated(wrong, x_a == wrong, x_b == wrong)

    monkeypatch.setattr(pipeline, "greedy_aggregate", cloud_errs)
    out = _ask(cloud(), aggregator="both", lookahead=2)
    assert "different texts" in out.extras["fallback"]  # type: ignore[attr-defined]
    assert out.finish_reason == "stop" and len(out.tokens) == LENGTH  # type: ignore[attr-defined]


class _EveryFewTokens(LiveScheduler):
    """Moves the aggregator every ``min_gap`` positions, whatever the profile says."""

    def next_side(self, current: int, position: int) -> int:
        return 1 - current if position - self.moved_at >= self.min_gap else current


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)])
def test_moving_the_aggregator_mid_answer_keeps_the_text(
    cloud, monkeypatch, sampling: SamplingParams
) -> None:  # type: ignore[no-untyped-def]
    """The live scheduler hands the role back and forth (here forced every 3 positions,
    on both sides): no draft is lost or double-counted and the text is the one a fixed
    aggregator gives."""
    from coinfer.engines.dragon import engine, remote

    monkeypatch.setattr(engine, "LiveScheduler", lambda: _EveryFewTokens(min_gap=3))
    monkeypatch.setattr(remote, "LiveScheduler", lambda: _EveryFewTokens(min_gap=3))
    expected = _synchronous_reference(sampling, seed=7)
    config = DragonConfig(max_tokens=64, sampling=sampling, seed=7)
    out = _ask(cloud(delay=0.005), config, aggregator="auto", lookahead=4)
    assert out.tokens == expected  # type: ignore[attr-defined]
    extras = out.extras  # type: ignore[attr-defined]
    assert "fallback" not in extras and extras["aggregator"] == "auto"
    assert extras["handovers"] >= len(expected) // 3 - 1
    assert extras["accepted"]["device"] + extras["rejected"]["device"] == len(expected) + 1


def test_a_kept_channel_serves_answer_after_answer_and_finds_a_returned_cloud(cloud) -> None:  # type: ignore[no-untyped-def]
    """One channel for many answers (no handshake each time); while the cloud is gone the
    device answers alone, and once it is back on its port the same channel uses it."""
    from coinfer.engines.dragon import open_channel

    server = cloud()
    link = CloudLink(address=f"127.0.0.1:{server.port}", token=TOKEN, idle_s=5)
    config = DragonConfig(aggregator="device")
    expected = _synchronous_reference()
    retrieved: list[float] = []

    def documents() -> list[Document]:
        retrieved.append(time.monotonic())
        return DEVICE_DOCS

    def ask(channel: object) -> object:
        return generate(
            _model(), QUESTION, documents=documents, config=config, cloud=link, channel=channel,
            prompt_style="text",
        )  # fmt: skip

    channel = open_channel(link)
    try:
        for _ in range(2):
            out = ask(channel)
            assert out.tokens == expected and out.extras["mode"] == "dragon"  # type: ignore[attr-defined]
        server.stop(0)
        alone = ask(channel)
        assert "fallback" in alone.extras and alone.tokens  # type: ignore[attr-defined]
        back = CloudService(_model(), _Corpus(), idle_s=5)
        servers = LinkServer(back.serve, token=TOKEN, port=server.port).start()
        try:
            deadline = time.monotonic() + 20
            while "fallback" in (out := ask(channel)).extras and time.monotonic() < deadline:  # type: ignore[attr-defined]
                time.sleep(0.2)
            assert out.extras["mode"] == "dragon" and out.tokens == expected  # type: ignore[attr-defined]
        finally:
            servers.stop(0)
    finally:
        channel.close()
    assert len(retrieved) >= 4  # the callable retrieved anew for every answer


@pytest.mark.parametrize("slow_from", [0, 6])
def test_a_slow_cloud_never_holds_the_device_past_its_deadline(slow_from: int) -> None:
    """The cloud takes 3 s per token from its ``slow_from``-th token on (0: already while
    reading its documents); the device waits ``idle_s`` = 0.5 s, then finishes alone."""

    def slow(prefix: list[int]) -> Mapping[int, float]:
        if len(prefix) - PROMPT >= slow_from:
            time.sleep(3.0)
        return _dist(prefix)

    service = CloudService(ScriptedModel(slow, n_ctx=128), _Corpus(), idle_s=5)
    server = LinkServer(service.serve, token=TOKEN).start()
    try:
        started = time.monotonic()
        out = generate(
            _model(),
            QUESTION,
            documents=DEVICE_DOCS,
            config=DragonConfig(aggregator="device"),
            cloud=CloudLink(address=f"127.0.0.1:{server.port}", token=TOKEN, idle_s=0.5),
            prompt_style="text",
        )
        elapsed = time.monotonic() - started
    finally:
        server.stop(0)
    assert "fallback" in out.extras and out.finish_reason == "stop" and len(out.tokens) == LENGTH
    assert elapsed < 3.0  # one idle_s and the device's own decoding, never the cloud's 3 s


def _by_text(docs: object, text: str) -> np.ndarray:
    """Dynamic weights for the test: document "A" (the device's) gains weight with every
    "d" in the text until its near-tie of c and d decides (both sides apply it to their
    own documents)."""
    return np.array([text.count("d") * 3.0 if d.name == "A" else 0.0 for d in docs])  # type: ignore[attr-defined]


@pytest.mark.parametrize("aggregator", ["device", "cloud", "both"])
def test_dynamic_weights_keep_the_text_the_synchronous_mixtures(cloud, monkeypatch, aggregator: str) -> None:  # type: ignore[no-untyped-def]
    """Both sides re-score every 4 tokens against the agreed text: the weights move, and
    the text is still the token-wise mixture's with the same re-scoring."""
    monkeypatch.setattr(_Corpus, "rescorer", lambda self, question, *, temperature: _by_text)
    expected = _synchronous_reference(rescore=_by_text)
    assert expected != _synchronous_reference()  # the re-scoring changes the text
    config = DragonConfig(max_tokens=64, rescore_every=4, aggregator=aggregator)  # type: ignore[arg-type]
    out = generate(
        _model(),
        QUESTION,
        documents=DEVICE_DOCS,
        config=config,
        cloud=CloudLink(address=f"127.0.0.1:{cloud().port}", token=TOKEN, idle_s=5),
        prompt_style="text",
        rescore=_by_text,
    )
    assert out.tokens == expected and "fallback" not in out.extras  # type: ignore[attr-defined]


def test_the_cloud_keeps_its_documents_read_across_questions(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The cloud reads a document once: the next answer that retrieves it reads only its
    own question (paper 003's documents' KVs kept next to their corpus), and the text is
    the same as reading everything afresh."""
    from coinfer.engines.dragon import doccache

    monkeypatch.setattr(doccache, "MIN_SHARED", 2)  # this script's prompts are 4 tokens long
    model = _model()
    server = LinkServer(CloudService(model, _Corpus(), idle_s=5).serve, token=TOKEN).start()
    try:
        first = _ask(server, aggregator="both")
        prefill_first = model.forwards[0]
        model.forwards.clear()
        second = _ask(server, aggregator="both")
    finally:
        server.stop(0)
    assert first.tokens == second.tokens == _synchronous_reference()  # type: ignore[attr-defined]
    # the second prefill read one token (the prompt's last) instead of the whole prompt
    assert prefill_first == PROMPT and model.forwards[0] == 1


def test_several_questions_in_flight_on_both_sides_give_each_the_synchronous_text() -> None:
    """Three answers at once over one channel: the cloud answers the three streams at once
    and the device decodes the three on one shared model; each text is the one it has
    alone, and both sides merged the answers' forwards into shared batches."""
    cloud_model, device_model = _model(), _model()
    cloud_model.forward_s = device_model.forward_s = 0.005  # answers in flight queue behind a forward
    service = CloudService(cloud_model, _Corpus(), idle_s=5, max_answers=3)
    server = LinkServer(service.serve, token=TOKEN).start()
    link = CloudLink(address=f"127.0.0.1:{server.port}", token=TOKEN, idle_s=5)
    channel, device = open_channel(link), SharedModel(device_model)
    outs: list[Any] = [None] * 3

    def answer(i: int) -> None:
        config = DragonConfig(max_tokens=64, aggregator="both", max_batch=3)
        outs[i] = generate(
            device, QUESTION, documents=DEVICE_DOCS, config=config, cloud=link, channel=channel,
            prompt_style="text",
        )  # fmt: skip

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    channel.close()
    server.stop(0)
    expected = _synchronous_reference()
    assert [o.tokens for o in outs] == [expected] * 3
    assert all("fallback" not in o.extras for o in outs)
    assert max(cloud_model.batch_sizes) > 1 and max(device_model.batch_sizes) > 1
    assert device_model.live_sequences == 0
