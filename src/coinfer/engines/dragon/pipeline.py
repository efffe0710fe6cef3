"""Speculative Aggregation as it runs (paper 003, §3 and §4.2's steps 1-5): one ``Peer``
per side, joined by a ``Stream``.

Each side's Decoder runs on its own thread and drafts ahead of the accepted text (up to
``lookahead`` tokens), assuming its drafts will be accepted: each draft goes to the
Aggregator (over the stream, or straight into the local queue on the aggregating side)
the moment it is decoded. The Aggregator takes the two drafts for the next position,
runs Algorithm 1 (``speculative_aggregate``; greedy: the mixture's argmax) and broadcasts
the decision. A side whose draft was rejected bumps its *epoch*, rolls its sequences back
to the accepted text plus the target token, and drafts on from there; drafts of an older
epoch still in flight are dropped when they arrive, never waited for.

``lookahead=0`` is token-wise synchronous aggregation (DRDG/TW): a side drafts one
position, then waits for its decision before decoding anything more.

With a ``LiveScheduler`` (§5's scheduler, live) the aggregator profiles both sides'
decoding times, their acceptance and the round-trip time (Ping/Pong), and when Eq. 6
prefers the other side it hands the role over with a decision: its own drafts still
pending go over to the new aggregator, which keeps its own (every side keeps a copy of
what it drafted), and drafts that crossed the handover on the wire are dropped as stale.
Each position's draws are the same wherever it is aggregated, so a move never changes
the text.

With ``both`` (symmetric aggregation, not in the paper) each side sends its drafts to the
other and runs the Aggregator on its own copy: both compute the same target from the same
two drafts and draws, so no decision travels. A side learns that its draft lost as soon as
it holds the other side's draft for that position, half a round trip sooner than from a
remote aggregator's decision; a side that is behind finds the other's draft already there
and never drafts on a token that will lose. A side ahead drafts on only as far as hides the
link: it waits for the other's draft while that is due sooner than a wasted forward would
cost, and sheds any lead beyond what the round trip needs (``_wait_budget``).
Each draft names the token it follows (``parent``), and a draft that does not follow the
agreed text fails the link rather than letting the two copies drift apart.

A Peer holds no sockets of its own: it reads and writes ``Envelope`` messages on the
stream it is given, so one class serves the device (a gRPC client) and the cloud (a gRPC
server).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coinfer.decoding.sampling import SamplingParams
from coinfer.engines.dragon.aggregation import (
    Aggregated,
    Uniforms,
    greedy_aggregate,
    side_weight,
    speculative_aggregate,
)
from coinfer.engines.dragon.scheduler import LiveScheduler, Profile
from coinfer.engines.dragon.side import CLOUD, DEVICE, Draft, RagSide
from coinfer.errors import TransportError
from coinfer.transport.link import Stream, envelope_type
from coinfer.transport.sparse import SparseDistribution, decode, encode

__all__ = ["Peer", "PeerStats", "check_decision", "received_draft", "wait_budget"]

PING_EVERY = 16  # positions between the live scheduler's round-trip measurements


@dataclass
class PeerStats:
    """What one answer's aggregation did: drafts each side had accepted and rejected,
    bytes this side sent, the drafts dropped as stale, the aggregator's moves."""

    accepted: list[int] = field(default_factory=lambda: [0, 0])
    rejected: list[int] = field(default_factory=lambda: [0, 0])
    bytes_sent: int = 0
    stale: int = 0
    handovers: int = 0


@dataclass(frozen=True)
class _Drafted:
    epoch: int
    position: int
    token: int
    dist: SparseDistribution
    log_h: float
    decode_s: float
    parent: int = 0  # the token at position - 1 this draft follows


def received_draft(d: Any, vocab_size: int) -> _Drafted:
    """The other side's ``Draft`` message, checked before it joins a queue: its tokens in
    the vocabulary, its distribution well formed (``sparse.decode``), its numbers finite
    (a NaN ``log_h`` would turn every mixture weight into NaN)."""
    if d.token >= vocab_size or d.parent >= vocab_size:
        raise TransportError(
            f"a draft names token {max(d.token, d.parent)}, outside a vocabulary of {vocab_size}"
        )
    if not (math.isfinite(d.log_h) and math.isfinite(d.decode_s) and d.decode_s >= 0):
        raise TransportError(f"a draft carries log h {d.log_h} and {d.decode_s} s: not finite numbers")
    return _Drafted(d.epoch, d.position, d.token, decode(d.dist, vocab_size), d.log_h, d.decode_s, d.parent)


def check_decision(d: Any, vocab_size: int) -> None:
    """The aggregator's ``Decision``: a token of the vocabulary, and with a handover a
    profile of finite, non-negative measurements."""
    if d.token >= vocab_size:
        raise TransportError(f"a decision names token {d.token}, outside a vocabulary of {vocab_size}")
    if d.handover:
        p = d.profile
        values = (p.device_decode_s, p.cloud_decode_s, p.device_acceptance, p.cloud_acceptance, p.rtt_s)
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise TransportError(f"a handover carries a profile that is not finite measurements: {values}")


class Peer:
    """One side's Decoder and, where ``aggregates``, the Aggregator.

    ``aggregates``: whether this side aggregates first; ``both``: every side aggregates
    (then ``aggregates`` is moot); ``schedule``: the live scheduler that may move the role
    (None: it stays). ``on_token`` is called with each token as
    it is decided.
    """

    def __init__(
        self,
        side: RagSide,
        me: int,
        *,
        aggregates: bool,
        stream: Stream,
        sampling: SamplingParams,
        seed: int,
        max_tokens: int,
        stop_ids: frozenset[int],
        lookahead: int = 8,
        schedule: LiveScheduler | None = None,
        both: bool = False,
        on_token: Callable[[int, tuple[bool, bool]], None] | None = None,
    ) -> None:
        self.side, self.me, self.aggregates, self.stream = side, me, aggregates or both, stream
        self.both = both
        if both:
            schedule = None
        self.sampling, self.seed, self.max_tokens, self.stop_ids = sampling, seed, max_tokens, stop_ids
        self.lookahead, self.schedule = lookahead, schedule
        self.on_token = on_token
        self.envelope = envelope_type()
        self.vocab_size = side.model.vocab_size
        self.text: list[int] = []
        self.finished: str | None = None
        self.stats = PeerStats()
        self._cond = threading.Condition()
        self._epoch = [0, 0]  # each side's rejections so far, as this peer has seen them
        self._restart = False
        self._queues: list[deque[_Drafted]] = [deque(), deque()]
        self._failure: str | None = None
        self._published_at = -1  # the position of this side's latest draft
        self._send_lock = threading.Lock()  # what a handover sends goes out before any later draft
        self._pings: dict[int, float] = {}
        self._published: dict[int, float] = {}  # when this side published each position's draft
        self._lag = 0.0  # how long after this side's draft the other's arrived, lately
        self._rtt = 0.0  # the round trip, measured by Ping/Pong (a moving average)
        self._other_done: str | None = None  # symmetric: the other side's Done, not yet ours
        self._decode_s = 0.0
        self._decoder = threading.Thread(target=self._decode_loop, name=f"dragon-decoder-{me}", daemon=True)
        self._reader = threading.Thread(target=self._read_loop, name=f"dragon-reader-{me}", daemon=True)

    # ---- running -----------------------------------------------------------------------
    def start(self) -> None:
        self._decoder.start()
        self._reader.start()

    def run(self, *, idle_timeout: float) -> str:
        """Aggregate (or follow the other side's decisions) until the answer is complete;
        its finish reason. ``TransportError`` when the link fails or no progress is made
        for ``idle_timeout`` seconds."""
        self.start()
        try:
            while True:
                if self.aggregates:
                    self._aggregate_next(idle_timeout)
                else:
                    self._wait_progress(idle_timeout)
                if self.finished:
                    if not self.aggregates or self.both:  # the other side may allow a longer answer
                        with contextlib.suppress(TransportError):
                            self._send(self.envelope(done={"reason": self.finished}))
                    return self.finished
        finally:
            self.stop()

    def stop(self) -> None:
        with self._cond:
            self.finished = self.finished or "interrupted"
            self._cond.notify_all()
        if self._decoder.is_alive() and threading.current_thread() is not self._decoder:
            self._decoder.join(timeout=30)

    # ---- the Decoder ---------------------------------------------------------------------
    def _decode_loop(self) -> None:
        try:
            while True:
                with self._cond:
                    self._cond.wait_for(self._may_draft)
                    if self.finished:
                        return
                    restart, self._restart = self._restart, False
                    target = list(self.text) if restart or self.lookahead == 0 else None
                    epoch = self._epoch[self.me]
                if target is not None:
                    self.side.sync(target)
                draft = self.side.draft()
                with self._cond:
                    if self._restart or self.finished or epoch != self._epoch[self.me]:
                        continue  # decided against while decoding: drop it
                self._publish(draft, epoch)
                if self.lookahead > 0 and self._still_drafting(draft, epoch):
                    self.side.advance(draft.token)
        except TransportError:
            return  # a draft could not be sent: the reader sees the stream end and judges it
        except Exception as exc:
            self._fail(f"the {'device' if self.me == DEVICE else 'cloud'} decoder failed: {exc}")

    def _may_draft(self) -> bool:
        if self.finished or self._restart:
            return True
        if len(self.side.generated) >= self.max_tokens:  # the answer cannot be longer
            return False
        ahead = len(self.side.generated) - len(self.text)
        if self.lookahead == 0:  # synchronous: this position's draft not yet out
            return ahead <= 0 and self._published_at < len(self.text)
        return ahead < self.lookahead

    def _publish(self, draft: Draft, epoch: int) -> None:
        """Into this side's own queue, and to the aggregator when it is the other side."""
        self._published_at = draft.position
        parent = self.side.generated[draft.position - 1] if draft.position > 0 else 0
        item = _Drafted(epoch, draft.position, draft.token, draft.dist, draft.log_h, draft.decode_s, parent)
        with self._send_lock:
            with self._cond:
                if epoch != self._epoch[self.me]:
                    return  # rejected while it was being published
                self._queues[self.me].append(item)
                self._published[draft.position] = time.monotonic()
                self._decode_s = (
                    draft.decode_s if not self._decode_s else 0.8 * self._decode_s + 0.2 * draft.decode_s
                )
                remote = not self.aggregates or self.both
                self._cond.notify_all()
            if remote:
                self._send(self._draft_message(item))

    def _still_drafting(self, draft: Draft, epoch: int) -> bool:
        """Symmetric aggregation: whether to draft on from this side's own token. When the
        other side's draft for this position is here, the target is waited for (a token
        that lost is never drafted on); else for at most ``wait_budget``."""
        if not self.both:
            return True
        with self._cond:
            other = 1 - self.me
            epochs = list(self._epoch)
            if any(d.position == draft.position and d.epoch == epochs[other] for d in self._queues[other]):
                wait, self._lag = 1.0, 0.0  # the aggregation runs at once
            else:
                wait = self._wait_budget()
            self._cond.wait_for(  # until decided, or either side's draft lost before this one
                lambda: (
                    self.finished or self._failure or len(self.text) > draft.position or self._epoch != epochs
                ),
                timeout=wait,
            )
            return not (self.finished or self._restart or epoch != self._epoch[self.me])

    def _wait_budget(self) -> float:
        return wait_budget(
            lag=self._lag,
            rtt=self._rtt,
            accepted=self.stats.accepted[self.me],
            rejected=self.stats.rejected[self.me],
            decode_s=self._decode_s,
        )

    def _draft_message(self, item: _Drafted) -> Any:
        return self.envelope(
            draft={
                "position": item.position,
                "epoch": item.epoch,
                "token": item.token,
                "dist": encode(item.dist),
                "log_h": item.log_h,
                "decode_s": item.decode_s,
                "parent": item.parent,
            }
        )

    # ---- messages ------------------------------------------------------------------------
    def _send(self, message: Any) -> None:
        self.stats.bytes_sent += message.ByteSize()
        self.stream.send(message)

    def _read_loop(self) -> None:
        try:
            while not self.finished:
                message = self.stream.recv(timeout=0.5)
                if message is not None:
                    self._receive(message)
        except TransportError as exc:
            if not (self.finished or self._other_done):  # a finished side may hang up
                self._fail(str(exc))
            with self._cond:
                self._cond.notify_all()

    def _receive(self, message: Any) -> None:
        kind = message.WhichOneof("body")
        if kind == "draft":
            item = received_draft(message.draft, self.vocab_size)
            with self._cond:
                if self.aggregates:
                    self._queues[1 - self.me].append(item)
                    mine = self._published.get(item.position)
                    if mine is not None:
                        self._lag = time.monotonic() - mine
                    self._cond.notify_all()
                else:  # sent before the other side learnt that it aggregates now
                    self.stats.stale += 1
        elif kind == "decision" and not self.aggregates:
            d = message.decision
            check_decision(d, self.vocab_size)
            handover = d.profile if d.handover else None
            self._apply(d.position, d.token, (d.device_accepted, d.cloud_accepted), handover=handover)
        elif kind == "ping":
            self._send(self.envelope(pong={"id": message.ping.id}))
        elif kind == "pong":
            sent = self._pings.pop(message.pong.id, None)
            if sent is not None:
                rtt = time.monotonic() - sent
                self._rtt = rtt if not self._rtt else 0.7 * self._rtt + 0.3 * rtt
                if self.schedule is not None:
                    self.schedule.profile.round_trip(rtt)
        elif kind == "done":
            with self._cond:
                if self.both:  # this side decides the end itself, from the drafts already sent
                    self._other_done = message.done.reason or "stop"
                else:
                    self.finished = self.finished or (message.done.reason or "stop")
                self._cond.notify_all()
        else:
            self._fail(f"unexpected {kind or 'empty'} message")

    def _fail(self, why: str) -> None:
        with self._cond:
            self._failure = self._failure or why
            self._cond.notify_all()

    # ---- the Aggregator ------------------------------------------------------------------
    def _aggregate_next(self, idle_timeout: float) -> None:
        position = len(self.text)
        if (self.schedule is not None or self.both) and position % PING_EVERY == 0:
            self._pings[position] = time.monotonic()
            self._send(self.envelope(ping={"id": position}))
        pair = self._wait_pair(position, idle_timeout)
        if pair is None:  # the other side ended the answer
            return
        device, cloud = pair
        if position > 0 and (device.parent != self.text[-1] or cloud.parent != self.text[-1]):
            raise TransportError(f"the two sides' drafts for position {position} follow different texts")
        eta = side_weight(device.log_h, cloud.log_h)  # the device's weight
        p_device, p_cloud = device.dist.dense(), cloud.dist.dense()
        # the device is always Algorithm 1's side a, whichever side aggregates: the same
        # draws then give the same text wherever the aggregation runs
        out: Aggregated
        if self.sampling.greedy:
            out = greedy_aggregate(device.token, p_device, cloud.token, p_cloud, eta)
        else:
            out = speculative_aggregate(
                device.token, p_device, cloud.token, p_cloud, eta, Uniforms.at(self.seed, position)
            )
        accepted = (out.accepted_a, out.accepted_b)
        moves = self._moves(position, out.token, (device, cloud), accepted)
        decision: dict[str, Any] = {
            "position": position,
            "token": out.token,
            "device_accepted": accepted[DEVICE],
            "cloud_accepted": accepted[CLOUD],
        }
        if moves and self.schedule is not None:
            decision.update(handover=True, profile=_profile_message(self.schedule.profile))
        if self.both:  # the other side decides the same on its own copy
            self._apply(position, out.token, accepted)
            return
        with self._send_lock:
            self._send(self.envelope(decision=decision))
            self._apply(position, out.token, accepted)
            if moves:
                self._hand_over()
        if self.finished:
            self._send(self.envelope(done={"reason": self.finished}))

    def _moves(
        self, position: int, token: int, pair: tuple[_Drafted, _Drafted], accepted: tuple[bool, bool]
    ) -> bool:
        """The live scheduler's step: profile this position, and whether the other side
        should aggregate from the next one (never on the answer's last token)."""
        if self.schedule is None:
            return False
        profile = self.schedule.profile
        for s in (DEVICE, CLOUD):
            profile.decoded(s, pair[s].decode_s)
            profile.judged(s, accepted[s])
        if token in self.stop_ids or position + 1 >= self.max_tokens:
            return False
        return self.schedule.next_side(self.me, position + 1) != self.me

    def _hand_over(self) -> None:
        """The other side aggregates now: it gets this side's pending drafts (it has its
        own); called with the send lock held, so they go out before any later draft."""
        with self._cond:
            self.aggregates = False
            self.stats.handovers += 1
            mine = [d for d in self._queues[self.me] if d.epoch == self._epoch[self.me]]
            self._queues[1 - self.me].clear()
        for item in mine:
            self._send(self._draft_message(item))

    def _take_over(self, profile: Any, position: int) -> None:
        """A handover received (under the lock): this side aggregates from ``position``."""
        self.aggregates = True
        self.stats.handovers += 1
        self._queues[1 - self.me].clear()
        if self.schedule is not None:
            self.schedule.profile = _profile_from(profile, self.schedule.profile.zeta)
            self.schedule.moved_at = position

    def _wait_pair(self, position: int, idle_timeout: float) -> list[_Drafted] | None:
        """Both sides' drafts for ``position`` of their current epochs (older ones dropped);
        None once the answer is finished."""
        deadline = time.monotonic() + idle_timeout
        with self._cond:
            while True:
                if self.finished:
                    return None
                self._check_failure()
                heads = [self._head(s, position) for s in (DEVICE, CLOUD)]
                if heads[0] is not None and heads[1] is not None:
                    return [heads[0], heads[1]]
                if self._other_done and heads[1 - self.me] is None:  # no draft of its will come
                    self.finished = self._other_done
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TransportError(f"no draft for position {position} within {idle_timeout:.0f} s")
                self._cond.wait(timeout=min(left, 0.5))

    def _head(self, side: int, position: int) -> _Drafted | None:
        queue = self._queues[side]
        while queue and (queue[0].epoch < self._epoch[side] or queue[0].position < position):
            queue.popleft()
            self.stats.stale += 1
        head = queue[0] if queue else None
        return head if head and head.position == position and head.epoch == self._epoch[side] else None

    def _apply(self, position: int, token: int, accepted: tuple[bool, bool], *, handover: Any = None) -> None:
        """A decision, on either side: the token joins the text; a side whose draft was
        rejected starts a new epoch (its queue is emptied, its decoder restarts). With
        ``handover`` (the sender's profile) this side aggregates from the next position."""
        with self._cond:
            if position != len(self.text):
                self._failure = f"a decision for position {position} arrived at {len(self.text)}"
                self._cond.notify_all()
                return
            self.text.append(token)
            for s in (DEVICE, CLOUD):
                if accepted[s]:
                    self.stats.accepted[s] += 1
                    if self._queues[s] and self._queues[s][0].position == position:
                        self._queues[s].popleft()
                else:
                    self.stats.rejected[s] += 1
                    self._epoch[s] += 1
                    # drafts of the new epoch may already be here (symmetric aggregation)
                    newer = [d for d in self._queues[s] if d.epoch >= self._epoch[s]]
                    self._queues[s] = deque(newer)
                    if s == self.me:
                        self._restart = True
            if token in self.stop_ids:
                self.finished = "stop"
            elif len(self.text) >= self.max_tokens:
                self.finished = "length"
            if handover is not None:
                self._take_over(handover, len(self.text))
            self._cond.notify_all()
        if self.on_token is not None:
            self.on_token(token, accepted)

    def _wait_progress(self, idle_timeout: float) -> None:
        with self._cond:
            before = len(self.text)
            if not self._cond.wait_for(
                lambda: self.finished or self._failure or len(self.text) > before, timeout=idle_timeout
            ):
                raise TransportError(f"no decision within {idle_timeout:.0f} s")
            self._check_failure()

    def _check_failure(self) -> None:
        if self._failure and not self.finished:
            raise TransportError(self._failure)


def wait_budget(*, lag: float, rtt: float, accepted: int, rejected: int, decode_s: float) -> float:
    """Symmetric aggregation: how long a side waits for the other side's draft for the
    position it has just drafted before drafting on from its own token.

    ``lag`` (how late the other side's drafts have lately arrived after this side's) is
    this side's lead plus the one-way trip. A lead of one one-way trip is all the other
    side needs to find each of this side's drafts already there, so whatever lag exceeds
    the round trip ``rtt`` is waited off: a lead beyond it hides nothing and risks
    forwards. A draft due within ``patience`` is waited for too, patience being what
    drafting on costs on average: this side's rejection rate (one of each as a prior)
    times one forward's ``decode_s``."""
    patience = (rejected + 1) / (accepted + rejected + 2) * decode_s
    if lag <= patience:
        return patience
    return max(0.0, lag - rtt)


def _profile_message(p: Profile) -> dict[str, float]:
    return {
        "device_decode_s": p.decode_s[DEVICE] or 0.0,
        "cloud_decode_s": p.decode_s[CLOUD] or 0.0,
        "device_acceptance": p.acceptance[DEVICE] or 0.0,
        "cloud_acceptance": p.acceptance[CLOUD] or 0.0,
        "rtt_s": p.rtt or 0.0,
    }


def _profile_from(m: Any, zeta: float) -> Profile:
    return Profile(
        zeta=zeta,
        decode_s=[m.device_decode_s, m.cloud_decode_s],
        acceptance=[m.device_acceptance, m.cloud_acceptance],
        rtt=m.rtt_s,
    )
