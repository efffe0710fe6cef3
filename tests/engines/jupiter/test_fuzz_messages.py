"""Fuzzing the control messages a Jupiter worker takes from rank 0: any JSON object is a
request whose fields have the types and ranges the worker uses, or a ``TransportError``
naming what is wrong; sampling parameters are numbers or a ``ConfigError``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coinfer.decoding.sampling import SamplingParams
from coinfer.engines.jupiter.wire import REQUESTS, check_request
from coinfer.errors import ConfigError, TransportError
from tests.fuzzing import json_values, within_deadline

pytestmark = pytest.mark.fuzz

_FIELDS = sorted({name for fields in REQUESTS.values() for name in fields} | {"op"})
_values = json_values | st.integers() | st.sampled_from([True, 0, -1, 2**31, 2**64, 3, None, {}])
messages = st.dictionaries(st.sampled_from(_FIELDS) | st.text(max_size=8), _values, max_size=6).flatmap(
    lambda d: st.sampled_from([*REQUESTS, "x", 7]).map(lambda op: {**d, "op": op})
)


@given(messages)
def test_any_message_is_a_checked_request_or_refused(message: dict) -> None:  # type: ignore[type-arg]
    try:
        op = within_deadline(lambda: check_request(message))
    except TransportError as exc:
        assert "rank 0" in str(exc)
        return
    for name, (kinds, required) in REQUESTS[op].items():
        assert name in message or not required
        value = message.get(name)
        if isinstance(value, int) and int in kinds:
            assert not isinstance(value, bool) and 0 <= value < 2**31


@given(json_values | st.dictionaries(st.sampled_from(["temperature", "top_k", "top_p", "seed"]), json_values))
def test_any_sampling_object_is_parameters_or_refused(obj: object) -> None:
    try:
        params = SamplingParams.from_json(obj)  # type: ignore[arg-type]
    except ConfigError as exc:
        assert str(exc)
        return
    assert params.temperature >= 0 and params.top_k >= 0 and 0 < params.top_p <= 1
