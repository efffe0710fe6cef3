import pytest

from coinfer.engines.collective.switch import PipelineSwitch, SwitchConfig
from coinfer.errors import ConfigError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _window(switch: PipelineSwitch, clock: Clock, tokens_per_s: float, rounds: int) -> bool:
    """``rounds`` verifications of one token each at ``tokens_per_s``; whether the last one
    completed a window."""
    done = False
    for _ in range(rounds):
        clock.now += 1.0 / tokens_per_s
        done = switch.observe(1)
    return done


def test_without_a_draft_model_drafting_it_never_pipelines() -> None:
    clock = Clock()
    switch = PipelineSwitch(SwitchConfig(window=4, recheck=8), clock)
    for _ in range(5):
        assert switch.decide(can_pipeline=False) is False
        assert _window(switch, clock, 10.0, 4)
    assert switch.rounds == {False: 20, True: 0} and switch.probes == 0


def test_the_pipeline_is_measured_once_then_runs_only_while_faster() -> None:
    clock = Clock()
    switch = PipelineSwitch(SwitchConfig(window=4, recheck=100, margin=0.05), clock)
    assert switch.decide(can_pipeline=False) is False
    _window(switch, clock, 10.0, 4)
    assert switch.decide(can_pipeline=True) is True  # a draft model drafts: measure the pipeline
    _window(switch, clock, 8.0, 4)
    assert switch.decide(can_pipeline=True) is False  # slower than sequential rounds
    _window(switch, clock, 10.0, 4)
    assert switch.decide(can_pipeline=True) is False
    assert switch.probes == 1 and switch.rounds == {False: 8, True: 4}


def test_a_pipeline_faster_by_more_than_the_margin_keeps_running() -> None:
    clock = Clock()
    switch = PipelineSwitch(SwitchConfig(window=4, recheck=100, margin=0.05), clock)
    switch.decide(can_pipeline=False)
    _window(switch, clock, 10.0, 4)
    switch.decide(can_pipeline=True)
    _window(switch, clock, 10.4, 4)  # within the margin: not worth the core
    assert switch.decide(can_pipeline=True) is False
    _window(switch, clock, 10.0, 4)
    switch.rate[True] = 12.0  # as if the pipeline's window had been this fast
    assert switch.decide(can_pipeline=True) is True
    _window(switch, clock, 12.0, 4)
    assert switch.decide(can_pipeline=True) is True
    assert switch.decide(can_pipeline=False) is False  # the draft models went off: nothing to overlap


def test_the_mode_not_running_is_measured_again_after_recheck_rounds() -> None:
    clock = Clock()
    switch = PipelineSwitch(SwitchConfig(window=4, recheck=12), clock)
    switch.decide(can_pipeline=True)
    _window(switch, clock, 12.0, 4)  # the probe: the pipeline
    modes = []
    for _ in range(6):
        modes.append(switch.decide(can_pipeline=True))
        _window(switch, clock, 12.0 if switch.pipelined else 10.0, 4)
    # sequential rounds measured (first unknown), then every 12 rounds again for one window
    assert modes == [False, True, False, True, True, False]
    assert switch.probes == 3 and switch.rounds == {False: 12, True: 16}


def test_prefill_time_is_left_out_of_the_window() -> None:
    clock = Clock()
    switch = PipelineSwitch(SwitchConfig(window=2, recheck=10), clock)
    switch.decide(can_pipeline=False)
    clock.now += 5.0
    switch.paused(5.0)
    assert _window(switch, clock, 4.0, 2)
    assert switch.rate[False] == pytest.approx(4.0)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError):
        SwitchConfig(window=8, recheck=4)
    with pytest.raises(ConfigError):
        SwitchConfig(margin=-0.1)
