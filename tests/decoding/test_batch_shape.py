"""A batched step priced by its passes, and evened where one pass of equal rows is
cheaper than the passes of its ragged rows (``decoding.batch_shape``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from coinfer.decoding.batch_shape import evened, shaped_price, step_price
from coinfer.decoding.cost_curve import CostCurve
from coinfer.decoding.draft_length import AdaptiveDraftLength, batch_lengths
from coinfer.models.llamacpp_split import split_passes


def _llama_passes(rows: Sequence[int]) -> list[int]:
    """llama.cpp with a cache per sequence, the requests on streams 0, 1, 2, ..."""
    return split_passes(list(enumerate(rows)))


def _flat(n: int) -> float:
    """A CPU's forward: a fixed cost, then a little per row."""
    return 1.0 + 0.05 * n


def _linear(n: int) -> float:
    """A forward whose rows cost more than its fixed part."""
    return 0.1 + 0.1 * n


def test_a_ragged_step_costs_each_of_its_passes() -> None:
    # rows 1, 2, 1, 2: the single rows on streams 0 and 2, the pairs on 1 and 3, four passes
    assert _llama_passes([1, 2, 1, 2]) == [1, 1, 2, 2]
    assert step_price([1, 2, 1, 2], _llama_passes, _flat) == pytest.approx(4 * 1.0 + 0.05 * 6)
    assert step_price([2, 2, 2, 2], _llama_passes, _flat) == pytest.approx(1.0 + 0.05 * 8)


def test_a_step_is_evened_only_where_one_pass_costs_less() -> None:
    assert evened([1, 2, 1, 2], _llama_passes, _flat) == 2
    assert evened([1, 1, 4, 4], _llama_passes, _flat) == 4  # 16 rows in one pass, not 2 and 8 in two
    assert evened([1, 1, 4, 4], _llama_passes, _linear) is None  # where rows cost more than passes
    assert evened([3, 3, 3], _llama_passes, _flat) is None  # even already
    assert evened([1, 2, 1, 2], lambda rows: [sum(rows)], _flat) is None  # one forward whatever its shape
    assert evened([1, 2, 1, 2], _llama_passes, _flat, most=6) is None  # 8 rows: past what may be bet on
    assert shaped_price([1, 2, 1, 2], _llama_passes, _flat, most=6) == step_price(
        [1, 2, 1, 2], _llama_passes, _flat
    )


def test_a_steps_price_is_its_cheaper_shape() -> None:
    assert shaped_price([1, 2, 1, 2], _llama_passes, _flat) == step_price([2, 2, 2, 2], _llama_passes, _flat)
    ragged = step_price([1, 1, 4, 4], _llama_passes, _linear)
    assert shaped_price([1, 1, 4, 4], _llama_passes, _linear) == ragged


def test_a_draft_that_would_run_as_a_pass_of_its_own_is_verified_in_an_evened_step() -> None:
    """One request copies with confidence, three have nothing to draft. Ragged, its rows are
    a second pass of their own and not worth it; evened, the four requests' rows are one
    pass, and the copy pays."""
    copy = [0.9, 0.9, 0.9]
    survivals = [copy, [], [], []]

    def ragged(rows: Sequence[int]) -> float:
        return step_price(rows, _llama_passes, _flat)

    def either(rows: Sequence[int]) -> float:
        return shaped_price(rows, _llama_passes, _flat)

    assert batch_lengths(survivals, _flat, price=ragged) == [0, 0, 0, 0]
    assert batch_lengths(survivals, _flat, price=either) == [3, 0, 0, 0]
    assert batch_lengths(survivals, _flat) == [3, 0, 0, 0]  # priced as one forward, whatever its shape


def test_a_step_run_as_passes_is_recorded_as_each_passs_share() -> None:
    """The cost curve stays one forward's price: a step of two passes is shared between
    them by the curve's prices, so the step's own size is not priced at their sum."""
    policy = AdaptiveDraftLength(costs=CostCurve({4: 1.0, 16: 3.0}), smoothing=1.0)
    policy.observe(drafted=19, draft_s=0.0, verify_s=8.0, passes=[4, 16])
    assert policy.costs[4] == pytest.approx(2.0) and policy.costs[16] == pytest.approx(6.0)
    assert 20 not in policy.costs
    policy.observe(drafted=7, draft_s=0.0, verify_s=1.5)  # one forward, as before
    assert policy.costs[8] == 1.5
