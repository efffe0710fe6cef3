"""Fuzzing what DRAGON reads off the link, as the protobuf messages the other side can
send: a draft is a checked draft (tokens in the vocabulary, a well-formed distribution,
finite numbers) or a ``TransportError``; a decision likewise; a device's ``Hello`` is a
valid configuration or a ``ConfigError`` the cloud answers with; a distribution's bytes
are a distribution or a ``TransportError``."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinfer.engines.dragon.pipeline import check_decision, received_draft
from coinfer.engines.dragon.remote import config_from_hello
from coinfer.errors import ConfigError, TransportError
from coinfer.transport.link import envelope_type
from coinfer.transport.sparse import decode, encode, sparsify
from tests.fuzzing import within_deadline

pytestmark = pytest.mark.fuzz

VOCAB = 300
u32 = st.integers(0, 2**32 - 1) | st.integers(0, VOCAB + 2)
u64 = st.integers(0, 2**64 - 1)
doubles = st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 2)
distributions = st.binary(max_size=64) | st.builds(
    lambda seed: encode(sparsify(np.random.default_rng(seed).dirichlet(np.ones(VOCAB)))), st.integers(0, 99)
)


@given(u32, u32, u32, distributions, doubles, doubles, u32)
def test_any_draft_is_checked_or_refused(position, epoch, token, dist, log_h, decode_s, parent) -> None:  # type: ignore[no-untyped-def]
    message = envelope_type()(
        draft={"position": position, "epoch": epoch, "token": token, "dist": dist, "log_h": log_h,
               "decode_s": decode_s, "parent": parent}
    )  # fmt: skip
    try:
        item = within_deadline(lambda: received_draft(message.draft, VOCAB))
    except TransportError as exc:
        assert str(exc)
        return
    assert item.token < VOCAB and item.parent < VOCAB and math.isfinite(item.log_h)
    assert item.dist.dense().shape == (VOCAB,) and item.dist.dense().sum() > 0


@given(u32, u32, st.booleans(), st.lists(doubles, min_size=5, max_size=5))
def test_any_decision_is_checked_or_refused(position, token, handover, profile) -> None:  # type: ignore[no-untyped-def]
    names = ("device_decode_s", "cloud_decode_s", "device_acceptance", "cloud_acceptance", "rtt_s")
    message = envelope_type()(
        decision={
            "position": position,
            "token": token,
            "handover": handover,
            "profile": dict(zip(names, profile, strict=True)),
        }
    )
    try:
        check_decision(message.decision, VOCAB)
    except TransportError as exc:
        assert str(exc)
        return
    assert token < VOCAB
    assert not handover or all(math.isfinite(v) and v >= 0 for v in profile)


HELLO = {
    **dict.fromkeys(("max_tokens", "top_k", "sampling_top_k", "chunk_chars", "transfer_max_ids"), u32),
    **dict.fromkeys(("temperature", "sampling_top_p", "relevance_temperature", "transfer_top_p"), doubles),
    "rescore_every": u32,
    "seed": u64,
    "retrieval": st.sampled_from(["", "bm25", "dense", "fused", "x"]),
}


@given(st.fixed_dictionaries(HELLO))
def test_any_hello_is_a_valid_configuration_or_refused(fields: dict) -> None:  # type: ignore[type-arg]
    hello = envelope_type()(hello=fields).hello
    try:
        config = config_from_hello(hello)
    except ConfigError as exc:
        assert str(exc)
        return
    assert config.sampling.temperature >= 0 and 1 <= config.top_k <= 32 and config.max_tokens >= 1


@given(st.binary(max_size=600))
def test_any_distribution_bytes_decode_or_are_refused(data: bytes) -> None:
    try:
        d = decode(data, VOCAB)
    except TransportError:
        return
    p = d.dense()
    assert p.shape == (VOCAB,) and np.all(np.isfinite(p)) and p.sum() > 0
