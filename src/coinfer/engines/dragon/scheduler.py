"""Greedy scheduling of the aggregation side (paper 003, §5, Eq. 6-8) and its profiler.

With side l aggregating, the next pair of drafts is ready after ``max(c_l, c_r)`` when
r's last draft was accepted (r decoded on meanwhile), and after ``max(c_l, c_r + rtt)``
when it was rejected (the decision travels to r, r decodes again, its draft travels
back). With r's drafts accepted at rate a_r (Eq. 7):

    Z^l = a_r max(c_l, c_r) + (1 - a_r) max(c_l, c_r + rtt)

The scheduler picks the side with the smaller expected latency per token (Eq. 6; Eq. 8
is the difference of the two), keeping the current side unless the other is better by a
``margin`` (a handover costs a one-way trip, so a near-tie is not worth one). The
profiler keeps moving averages of each side's decoding time per token, the round-trip
time and each side's acceptance rate (the paper's runtime stage; the decoding times
travel with the drafts). ``LiveScheduler`` applies the policy during an answer;
``simulate`` applies it to a recorded trace, for sweeps over delays (§7.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coinfer.engines.dragon.side import CLOUD, DEVICE

__all__ = [
    "CLOUD",
    "DEVICE",
    "LiveScheduler",
    "Profile",
    "choose_aggregator",
    "latency_per_token",
    "simulate",
]


def latency_per_token(c_local: float, c_remote: float, rtt: float, remote_acceptance: float) -> float:
    """Eq. 7: the expected seconds per token while the local side aggregates."""
    a = min(1.0, max(0.0, remote_acceptance))
    return a * max(c_local, c_remote) + (1 - a) * max(c_local, c_remote + rtt)


def choose_aggregator(
    current: int,
    decode_s: tuple[float, float],
    rtt: float,
    acceptance: tuple[float, float],
    *,
    margin: float = 0.0,
) -> int:
    """Eq. 6: the side (DEVICE or CLOUD) whose aggregation makes tokens soonest;
    ``decode_s`` and ``acceptance`` are indexed by side. The other side must be better
    by the fraction ``margin`` of the current side's latency to take over."""
    z = [latency_per_token(decode_s[s], decode_s[1 - s], rtt, acceptance[1 - s]) for s in (DEVICE, CLOUD)]
    other = 1 - current
    return other if z[other] < (1 - margin) * z[current] else current


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

    def choose(self, current: int, *, margin: float = 0.0) -> int:
        """The side to aggregate next; the current one until everything was measured."""
        d, a = self.decode_s, self.acceptance
        if self.rtt is None or d[0] is None or d[1] is None or a[0] is None or a[1] is None:
            return current
        return choose_aggregator(current, (d[0], d[1]), self.rtt, (a[0], a[1]), margin=margin)


@dataclass
class LiveScheduler:
    """Eq. 6 during an answer: after each decision the aggregator asks ``next_side``
    whether to hand its role over. It keeps the role for at least ``min_gap`` positions
    after a move, and moves only for a gain of ``margin`` (no flapping on a near-tie)."""

    margin: float = 0.1
    min_gap: int = 8
    profile: Profile = field(default_factory=Profile)
    moved_at: int = 0

    def next_side(self, current: int, position: int) -> int:
        if position - self.moved_at < self.min_gap:
            return current
        side = self.profile.choose(current, margin=self.margin)
        if side != current:
            self.moved_at = position
        return side


def simulate(
    decode_s: tuple[float, float],
    rtt: float,
    accepted: list[tuple[bool, bool]],
    policy: int | LiveScheduler,
) -> tuple[float, int]:
    """Eq. 7 over a recorded answer (``accepted``: each position's (device, cloud)
    acceptance): the seconds it takes with the aggregator fixed on a side (``policy`` is
    DEVICE or CLOUD) or moved by a ``LiveScheduler`` (each move costing a one-way trip),
    and how many moves were made. The live profile learns the acceptance as it goes."""
    live = policy if isinstance(policy, LiveScheduler) else None
    side = policy if isinstance(policy, int) else DEVICE
    total, moves = 0.0, 0
    for position, judged in enumerate(accepted):
        local, remote = decode_s[side], decode_s[1 - side]
        total += max(local, remote) if judged[1 - side] else max(local, remote + rtt)
        if live is None:
            continue
        for s in (DEVICE, CLOUD):
            live.profile.decoded(s, decode_s[s])
            live.profile.judged(s, judged[s])
        live.profile.round_trip(rtt)
        if (nxt := live.next_side(side, position + 1)) != side:
            side, moves, total = nxt, moves + 1, total + rtt / 2
    return total, moves
