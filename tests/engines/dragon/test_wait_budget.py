"""Symmetric aggregation's waiting rule: a side waits for a draft that is due soon, sheds a
lead the link does not need, and drafts on when its lead only hides the round trip."""

from __future__ import annotations

import pytest

from coinfer.engines.dragon.pipeline import wait_budget


def test_a_draft_due_sooner_than_a_wasted_forward_is_waited_for() -> None:
    # rejected 1 in 4 (with the prior 2 in 6): patience is a third of a 90 ms forward
    assert wait_budget(lag=0.01, rtt=0.002, accepted=3, rejected=1, decode_s=0.09) == pytest.approx(0.03)


def test_a_lead_beyond_the_round_trip_is_waited_off() -> None:
    # 90 ms ahead on a 2 ms link (a restart on the other side): wait almost all of it
    assert wait_budget(lag=0.09, rtt=0.002, accepted=3, rejected=1, decode_s=0.09) == pytest.approx(0.088)


def test_a_lead_that_only_hides_the_round_trip_drafts_on() -> None:
    # 100 ms late on a 100 ms round trip: the lead is one one-way trip, exactly what the
    # other side needs, so no wait
    assert wait_budget(lag=0.1, rtt=0.1, accepted=3, rejected=1, decode_s=0.09) == 0.0
    assert wait_budget(lag=0.12, rtt=0.1, accepted=3, rejected=1, decode_s=0.09) == pytest.approx(0.02)


def test_a_side_that_always_wins_barely_waits() -> None:
    assert wait_budget(lag=0.01, rtt=0.1, accepted=98, rejected=0, decode_s=0.09) < 0.001
