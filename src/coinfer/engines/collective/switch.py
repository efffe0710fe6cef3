"""Whether the pipeline pays for the core it takes (``--pipeline`` means "allowed").

The pipeline (paper 001, §3.4) overlaps drafting with verifying. The paper's drafts run
on their own GPUs; on a CPU the overlap is paid for with cores: while a draft model drafts
beside it, the target verifies with the cores the drafts leave it. Whether the overlap
gains more than the lost core costs depends on the machine, the models, the batch and
the text, so ``PipelineSwitch`` measures it, the way the gate measures each draft:

* throughput is measured over *windows* of ``window`` verifications: the tokens they
  produced over their wall time, the prefills of joining requests left out;
* the run starts with sequential rounds (drafting, then verifying, each with every core);
* the pipeline is considered only while it has something to overlap: a draft model
  drafts (``can_pipeline``: the gate has one on). N-gram lookup costs next to nothing,
  and with every draft model gated off there is no drafter thread at all;
* the first time it may run, it runs one window (a probe); from then on, after each
  window, the mode whose latest window was faster runs, the pipeline only when faster by
  ``margin``;
* every ``recheck`` rounds the mode not running is measured again for one window, so a
  change in the text, the batch or the drafts that turns the balance is seen.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from coinfer.errors import ConfigError

__all__ = ["PipelineSwitch", "SwitchConfig"]


@dataclass(frozen=True)
class SwitchConfig:
    """``window``: verifications per measurement; ``recheck``: rounds between measuring the
    mode not running again; ``margin``: how much faster the pipeline must be to run."""

    window: int = 12
    recheck: int = 96
    margin: float = 0.03

    def __post_init__(self) -> None:
        if self.window < 1 or self.recheck < self.window or self.margin < 0:
            raise ConfigError("need window >= 1, recheck >= window and margin >= 0")


class PipelineSwitch:
    """Chooses, window by window, between pipelined and sequential rounds (see the module)."""

    def __init__(
        self,
        config: SwitchConfig = SwitchConfig(),  # noqa: B008 (frozen)
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = config
        self._clock = clock
        self.pipelined = False  # the mode running now
        self.rate: dict[bool, float | None] = {False: None, True: None}  # tokens/s, latest window
        self.rounds: dict[bool, int] = {False: 0, True: 0}  # verifications run in each mode
        self.probes = 0  # windows run to measure the mode not chosen
        self._since_check = 0
        self._restart()

    def _restart(self) -> None:
        self._w_rounds, self._w_tokens, self._w_paused = 0, 0, 0.0
        self._w_start = self._clock()

    def decide(self, can_pipeline: bool) -> bool:
        """The mode for the next window (True: pipelined); starts a new window."""
        self.pipelined = self._choose(can_pipeline)
        self._restart()
        return self.pipelined

    def _choose(self, can_pipeline: bool) -> bool:
        if not can_pipeline:
            return False
        piped, plain = self.rate[True], self.rate[False]
        if piped is None:
            self.probes += 1
            return True
        if self._since_check >= self.config.recheck:
            self._since_check = 0
            self.probes += 1
            return not self.pipelined
        if plain is None:
            return False
        return piped > plain * (1.0 + self.config.margin)

    def paused(self, seconds: float) -> None:
        """``seconds`` of the window went to something else (a prefill): not counted."""
        self._w_paused += seconds

    def observe(self, tokens: int) -> bool:
        """A verification in the running mode produced ``tokens``; whether its window is
        complete (then ``decide`` again)."""
        self.rounds[self.pipelined] += 1
        self._since_check += 1
        self._w_rounds += 1
        self._w_tokens += tokens
        if self._w_rounds < self.config.window:
            return False
        seconds = self._clock() - self._w_start - self._w_paused
        if seconds > 0:
            self.rate[self.pipelined] = self._w_tokens / seconds
        return True
