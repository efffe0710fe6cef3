"""Greedy scheduling of the aggregation side (paper 003, §5, Eq. 6-8) and its profiler.

With side l aggregating, the next pair of drafts is ready after ``max(c_l, c_r)`` when
r's last draft was accepted (r decoded on meanwhile), and after ``max(c_l, c_r + rtt)``
when it was rejected (the decision travels to r, r decodes again, its draft travels
back). With r's drafts accepted at rate a_r (Eq. 7):

    Z^l = a_r max(c_l, c_r) + (1 - a_r) max(c_l, c_r + rtt)

The scheduler picks the side with the smaller expected latency per token (Eq. 6; Eq. 8
is the difference of the two), keeping the current side on a tie. The profiler keeps
moving averages of each side's decoding time per token, the round-trip time and each
side's acceptance rate (the paper's runtime stage; the decoding times travel with the
drafts).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coinfer.engines.dragon.side import CLOUD, DEVICE

__all__ = ["CLOUD", "DEVICE", "Profile", "choose_aggregator", "latency_per_token"]


def latency_per_token(c_local: float, c_remote: float, rtt: float, remote_acceptance: float) -> float:
    """Eq. 7: the expected seconds per token while the local side aggregates."""
    a = min(1.0, max(0.0, remote_acceptance))
    return a * max(c_local, c_remote) + (1 - a) * max(c_local, c_remote + rtt)


def choose_aggregator(
    current: int, decode_s: tuple[float, float], rtt: float, acceptance: tuple[float, float]
) -> int:
    """Eq. 6: the side (DEVICE or CLOUD) whose aggregation makes tokens soonest;
    ``decode_s`` and ``acceptance`` are indexed by side."""
    z = [latency_per_token(decode_s[s], decode_s[1 - s], rtt, acceptance[1 - s]) for s in (DEVICE, CLOUD)]
    other = 1 - current
    return other if z[other] < z[current] else current


@dataclass
class Profile:
    """Moving averages (weight ``zeta`` on each new observation) of what the scheduler
    needs: decoding seconds per token and acceptance rate per side, and the RTT."""

    zeta: float = 0.2
    decode_s: list[float | None] = field(default_factory=lambda: [None, None])
    acceptance: list[float | None] = field(default_factory=lambda: [None, None])
    rtt: float | None = None

    def _mix(self, old: float | None, new: float) -> float:
        return new if old is None else (1 - self.zeta) * old + self.zeta * new

    def decoded(self, side: int, seconds: float) -> None:
        self.decode_s[side] = self._mix(self.decode_s[side], seconds)

    def judged(self, side: int, accepted: bool) -> None:
        self.acceptance[side] = self._mix(self.acceptance[side], 1.0 if accepted else 0.0)

    def round_trip(self, seconds: float) -> None:
        self.rtt = self._mix(self.rtt, seconds)

    def choose(self, current: int) -> int:
        """The side to aggregate next; the current one until everything was measured."""
        d, a = self.decode_s, self.acceptance
        if self.rtt is None or d[0] is None or d[1] is None or a[0] is None or a[1] is None:
            return current
        return choose_aggregator(current, (d[0], d[1]), self.rtt, (a[0], a[1]))
