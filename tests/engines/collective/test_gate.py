"""The source gate: a source drafts for every request while it pays for itself, and
explores one request within its time budget otherwise (costs given, not timed)."""

from __future__ import annotations

import pytest

from coinfer.engines.collective import gate as gate_module
from coinfer.engines.collective.gate import GateConfig, GateMemory, SourceGate
from coinfer.errors import ConfigError


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(gate_module.time, "perf_counter", c)
    return c


def _round(
    gate: SourceGate, clock: Clock, keys: list[int], s: int, holds: list[int], cost: float
) -> list[list[int]]:
    """One round: plan, draft ``s`` tokens per planned request at ``cost`` seconds per
    request for source 0 (free for source 1), score with ``holds[i]`` tokens held, verify."""
    plans = gate.plan(keys, s)
    tokens = len(keys)
    for i, plan in enumerate(plans):
        drafts = [[7] * s for _ in plan]
        seconds = cost * len(plan) if i == 0 else 0.0
        gate.drafted(i, [keys[j] for j in plan], seconds, drafts)
        clock.now += seconds
        for _ in plan:
            gate.scored(i, s, holds[i], s + 1)
        tokens += s * bool(plan)
    verify = 0.07 + 0.02 * (tokens - 1)  # a CPU-like cost: 70 ms for one token, 20 ms more per token
    gate.verified(tokens, verify)
    clock.now += verify
    return plans


def test_a_cheap_source_that_holds_drafts_for_every_request(clock: Clock) -> None:
    gate = SourceGate(2)
    gate.prefilled(2, 0.2)
    plans = [_round(gate, clock, [0, 1], 4, holds=[0, 4], cost=0.05) for _ in range(12)]
    assert plans[-1][1] == [0, 1] and gate.on == [False, True]
    assert gate.rounds_on[1] >= 8


def test_a_source_whose_drafts_cost_more_than_they_save_only_explores(clock: Clock) -> None:
    """Source 0 holds every token but costs 60 ms per request and token: on this cost
    curve plain decoding is faster, so it is turned off and explores within 3% of the time."""
    gate = SourceGate(2, GateConfig(explore_share=0.03), with_model=[True, False])
    gate.prefilled(1, 0.1)
    start = clock.now
    for _ in range(200):
        _round(gate, clock, [0], 4, holds=[4, 0], cost=0.24)
    assert gate.on == [False, False]
    explored = gate.rounds_explored[0]
    assert explored >= 1 and explored * 0.24 <= 0.03 * (clock.now - start) + 0.24 + 0.2  # within budget
    assert gate.rounds_on[0] == 0


def test_time_spent_reading_prompts_buys_no_exploring(clock: Clock) -> None:
    """Exploring is a share of the decoding time: a run whose requests' prefills took 60 s
    between its rounds explores as much as one without them (source 0 drafts without a
    model, so no prefill prices its set-up)."""
    explored = []
    for prefill_s in (0.0, 60.0):
        gate = SourceGate(1, GateConfig(explore_share=0.03))
        gate.prefilled(1, 0.1)
        for i in range(200):
            _round(gate, clock, [0], 4, holds=[4], cost=0.24)
            if i % 50 == 0:
                gate.prefilled(1, prefill_s)
                clock.now += prefill_s
        explored.append(gate.rounds_explored[0])
    assert explored[0] >= 2 and explored[1] == explored[0]


def test_sources_that_do_not_pay_share_one_exploring_budget(clock: Clock) -> None:
    """Two sources that cost more than they save (0 and 1, 240 ms a draft) and a free one
    that never holds: together they explore within 3% of the decoding time, not 3% each,
    and each gets its turn."""
    gate = SourceGate(3, GateConfig(explore_share=0.03), with_model=[True, True, False])
    gate.prefilled(1, 0.1)
    start = clock.now
    spent = 0.0
    for _ in range(600):
        plans = gate.plan([0], 4)
        tokens = 1
        for i, plan in enumerate(plans):
            seconds = 0.24 * len(plan) if i < 2 else 0.0
            gate.drafted(i, [0] * len(plan), seconds, [[7] * 4 for _ in plan])
            for _ in plan:
                gate.scored(i, 4, 4 if i < 2 else 0, 5)
            clock.now += seconds
            spent += seconds
            tokens += 4 * bool(plan)
        verify = 0.07 + 0.02 * (tokens - 1)
        gate.verified(tokens, verify)
        clock.now += verify
    assert gate.on == [False, False, False]
    assert min(gate.rounds_explored[:2]) >= 2  # both were measured, in turn
    assert spent <= 0.03 * (clock.now - start) + 0.24 + 0.1


def test_bad_gate_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        GateConfig(explore_share=0.0)
    with pytest.raises(ConfigError):
        GateConfig(warmup=0)


def test_a_source_that_sizes_its_own_drafts_is_always_on(clock: Clock) -> None:
    gate = SourceGate(2, sizes_own=[False, True])
    gate.prefilled(1, 0.1)
    plans = [_round(gate, clock, [0, 1], 4, holds=[0, 0], cost=0.0) for _ in range(20)]
    assert all(p[1] == [0, 1] for p in plans) and gate.on == [False, True]


def test_a_source_that_could_not_pay_even_if_every_draft_held_is_not_set_up_for_new_requests(
    clock: Clock,
) -> None:
    """At 240 ms a draft, source 0 is slower than plain decoding at every length even when
    every token holds: once measured on the first request it explores none of the next
    (a draft model's set-up would be a prefill of each whole prompt)."""
    gate = SourceGate(1, GateConfig(explore_share=0.03), with_model=[True])  # the only one off
    gate.prefilled(1, 0.1)
    explored = []
    for request in range(3):
        before = gate.rounds_explored[0]
        for _ in range(400):
            _round(gate, clock, [request], 4, holds=[4], cost=0.24)
        explored.append(gate.rounds_explored[0] - before)
    assert explored[0] >= 3 and explored[1:] == [0, 0]


def test_a_later_run_on_the_same_target_starts_from_what_the_last_one_measured(clock: Clock) -> None:
    memory = GateMemory()
    first = SourceGate(2, names=["model", "cheap"], memory=memory)
    first.prefilled(2, 0.2)
    for _ in range(12):
        _round(first, clock, [0, 1], 4, holds=[0, 4], cost=0.05)
    fresh = SourceGate(2)
    fresh.prefilled(2, 0.2)
    again = SourceGate(2, names=["model", "cheap"], memory=memory)
    again.prefilled(2, 0.2)
    assert _round(fresh, clock, [5, 6], 4, holds=[0, 4], cost=0.05)[1] != [0, 1]  # measures first
    assert _round(again, clock, [5, 6], 4, holds=[0, 4], cost=0.05)[1] == [0, 1]  # known to pay
    with pytest.raises(ConfigError, match="source names"):
        SourceGate(2, memory=memory)


def test_a_source_whose_record_says_it_would_not_pay_is_not_set_up_either(clock: Clock) -> None:
    """At 100 ms a draft source 0 would pay if every token held, but half of them fail,
    and even two standard errors above that it would not: not set up for new requests."""
    gate = SourceGate(2, GateConfig(explore_share=0.03), with_model=[True, False])
    gate.prefilled(1, 0.1)
    explored = []
    for request, rounds in enumerate([1500, 400, 400]):  # the first long enough to gather a record
        before = gate.rounds_explored[0]
        for _ in range(rounds):
            _round(gate, clock, [request], 4, holds=[1, 0], cost=0.1)
        explored.append(gate.rounds_explored[0] - before)
    assert explored[0] >= 3 and explored[1:] == [0, 0]


def test_a_source_that_holds_most_tokens_but_too_few_to_pay_is_not_set_up_once_its_record_is_long(
    clock: Clock,
) -> None:
    """At 120 ms a draft source 0 would pay if every token held. Three of its four hold, and
    no length pays at that, nor two standard errors above it over its whole record. Its
    recent record alone (decayed, worth about ten drafts) would still allow a 0.91 rate:
    that is not what rules on a set-up."""
    gate = SourceGate(1, GateConfig(explore_share=0.03), with_model=[True])  # the only one off
    gate.prefilled(1, 0.1)
    explored = []
    for request, rounds in enumerate([1500, 400, 400]):
        before = gate.rounds_explored[0]
        for _ in range(rounds):
            _round(gate, clock, [request], 4, holds=[3], cost=0.12)
        explored.append(gate.rounds_explored[0] - before)
    assert explored[0] >= 3 and explored[1:] == [0, 0]
