"""The drafter contract's helpers: the shared prefix of two contexts, and rolling a draft
sequence back to a context."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coinfer.decoding.drafters import common_prefix, rewind_to
from coinfer.testing import ScriptedModel

tokens = st.lists(st.integers(0, 3), max_size=40)


@settings(max_examples=300, deadline=None)
@given(tokens, tokens)
def test_common_prefix_is_the_length_of_the_shared_start(a: list[int], b: list[int]) -> None:
    n = common_prefix(a, tuple(b))
    assert a[:n] == b[:n]
    assert n == min(len(a), len(b)) or a[n] != b[n]


def test_rewind_keeps_the_shared_prefix_and_always_one_token_to_read() -> None:
    model = ScriptedModel(lambda prefix: 0)
    seq = model.new_sequence()
    model.extend(seq, [1, 2, 3, 4])
    assert rewind_to(model, seq, [1, 2, 9, 9]) == [9, 9] and seq.tokens == [1, 2]
    assert rewind_to(model, seq, [1, 2]) == [2] and seq.tokens == [1]  # fresh logits need a token
