"""Several requests in the pipeline at once (issue 62): while the last device runs one
request's step, the first runs another's, so no device waits for a single request's
token to come round.

Rank 0 gives each request a *slot*, its own cache in every stage (``Stage.use``; the
header's fifth int names it), sends its prompt in the sequence plan's parts, then one
token per step. Every request that is not waiting for a token has its next forward sent
before rank 0 waits for the oldest reply; the replies come back in the order the forwards
went in, since every stage takes its messages in order. A receive is posted for each
reply as its forward goes in (``Replies``), so the last device's send never waits for
rank 0 while rank 0 waits for its own send to the next device.

Requests join between steps (``Arrivals``), up to ``slots`` at once (the rest wait for a
slot), and leave when done, when their token budget is spent, or when their caller goes
away (a request whose step is on its way ends when its reply comes; each that leaves
gets a last step that says ``cancelled``). Every request
of a run samples alike (one ``Picker`` on the last device): greedy, or by position
seeded draws, which are what each request would draw alone. Plain decoding only: trees
and outline points go one request at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from coinfer.decoding.engine import Arrivals
from coinfer.engines.jupiter.pipeline import (
    DECODE,
    MAX_SLOTS,
    PREFILL,
    STOP,
    Answerer,
    Traffic,
    check_parts,
    enter_slot,
    make_header,
    pass_on,
    settle,
)
from coinfer.errors import ConfigError

__all__ = ["Flight", "Replies", "Step", "drive_interleaved"]


@dataclass
class Flight:
    """One request in the pipeline: its slot, prompt, budget and where it stands."""

    key: int
    slot: int
    prompt: list[int]
    budget: int
    parts: tuple[int, ...]
    position: int = 0  # tokens its caches hold (after the forward in flight)
    produced: int = 0
    next_ids: list[int] = field(default_factory=list)  # what its next forward feeds
    waiting: bool = False  # a forward of it is in the pipeline; its token not back yet
    gone: bool = False  # its caller went away


@dataclass(frozen=True)
class Step:
    """A token for request ``key`` (whose prompt has ``prompt_tokens``); ``finish``:
    ``stop`` (an end token) or ``length`` (its budget) on its last, ``cancelled`` (and
    no token) when its caller went away."""

    key: int
    token: int | None
    finish: str | None
    prompt_tokens: int


class Replies:
    """The last device's tokens, oldest first, a receive posted as each forward that asks
    for one goes in (one device: the tokens rank 0 kept itself)."""

    def __init__(self, world: int, traffic: Traffic) -> None:
        self.world, self.traffic = world, traffic
        self._posted: deque[tuple[int, Any, Any]] = deque()

    def __len__(self) -> int:
        return len(self._posted)

    def expect(self, key: int) -> None:
        """A forward of ``key`` that ends with a token just went in."""
        if self.world == 1:
            self._posted.append((key, None, None))
            return
        import torch
        import torch.distributed as dist

        buf = torch.empty(1, dtype=torch.int64)
        self._posted.append((key, buf, dist.irecv(buf, self.world - 1)))

    def take(self) -> tuple[int, int]:
        """The oldest reply: (its request, its token)."""
        key, buf, work = self._posted.popleft()
        if work is None:
            return key, int(self.traffic.kept.pop(0)[0])
        work.wait()
        return key, int(buf[0])


def drive_interleaved(
    stage: Any,
    world: int,
    arrivals: Arrivals,
    *,
    slots: int,
    parts_of: Callable[[int], Sequence[int]],
    eos: Collection[int],
    pick: Answerer | None = None,
    traffic: Traffic | None = None,
) -> Generator[Step, None, None]:
    """Rank 0's loop: the requests of ``arrivals`` through the pipeline, up to ``slots``
    at once, a ``Step`` per token as it comes back, until no request is left (then
    ``STOP`` goes to every rank, also when the caller stops early). ``parts_of``: the
    sequence plan's parts for a prompt of that many tokens; ``pick``: the token choice
    when rank 0 is also the last stage (one device)."""
    if not 1 <= slots <= MAX_SLOTS:
        raise ConfigError(f"1 to {MAX_SLOTS} requests in the pipeline at once, not {slots}")
    traffic = traffic if traffic is not None else Traffic()
    run = _Run(stage, world, slots, parts_of, pick, traffic)
    broken = False
    try:
        while True:
            yield from run.admit(arrivals)
            run.send_ready()
            if not run.replies:  # every request in a slot has a step on its way: none is left
                return
            key, token = run.replies.take()
            yield run.came_back(key, token, eos)
    except RuntimeError:  # gloo: a device's connection broke; nothing more will come back
        broken = True
        raise
    finally:
        if not broken:
            run.stop()


class _Run:
    """One run's state at rank 0 (``drive_interleaved``)."""

    def __init__(
        self,
        stage: Any,
        world: int,
        slots: int,
        parts_of: Callable[[int], Sequence[int]],
        pick: Answerer | None,
        traffic: Traffic,
    ) -> None:
        self.stage, self.world, self.pick, self.traffic = stage, world, pick, traffic
        self.parts_of = parts_of
        self.free = list(range(slots - 1, -1, -1))  # popped from the end: slot 0 first
        self.flights: dict[int, Flight] = {}
        self.queued: deque[tuple[int, list[int], int]] = deque()
        self.replies = Replies(world, traffic)
        self.pending: list[Any] = []

    def admit(self, arrivals: Arrivals) -> list[Step]:
        """Requests that left end (now, or when their token comes back: the ``cancelled``
        steps of those that end now are returned); new ones take free slots, the rest
        wait for one."""
        ended = []
        for key in arrivals.left():
            flight = self.flights.get(key)
            if flight is not None:
                flight.gone = True
                if not flight.waiting:
                    self.retire(flight)
                    ended.append(Step(key, None, "cancelled", len(flight.prompt)))
            for q in [q for q in self.queued if q[0] == key]:
                self.queued.remove(q)
                ended.append(Step(key, None, "cancelled", len(q[1])))
        self.queued.extend(arrivals.joined())
        while self.queued and self.free:
            key, prompt, budget = self.queued.popleft()
            parts = tuple(self.parts_of(len(prompt)))
            check_parts(prompt, parts)
            self.flights[key] = Flight(key, self.free.pop(), list(prompt), budget, parts)
        return ended

    def send_ready(self) -> None:
        """Every request not waiting for a token sends its next forward."""
        for flight in list(self.flights.values()):
            if not flight.waiting and not flight.gone:
                self._send(flight)

    def _send(self, flight: Flight) -> None:
        if flight.position == 0:  # its prompt, in the plan's parts; the last part asks for a token
            for i, n in enumerate(flight.parts):
                header = make_header(PREFILL, flight.position, n, i == len(flight.parts) - 1, flight.slot)
                ids = flight.prompt[flight.position : flight.position + n]
                self._forward(header, ids)
                flight.position += n
        else:
            header = make_header(DECODE, flight.position, 1, True, flight.slot)
            self._forward(header, flight.next_ids)
            flight.position += 1
        self.replies.expect(flight.key)
        flight.waiting = True

    def _forward(self, header: Any, ids: list[int]) -> None:
        import torch

        enter_slot(self.stage, header)
        x = torch.tensor([ids], dtype=torch.int64)
        self.pending = pass_on(self.stage, 0, self.world, header, x, self.pick, self.traffic, self.pending)

    def came_back(self, key: int, token: int, eos: Collection[int]) -> Step:
        """``key``'s token is back: its step (a request that left meanwhile ends, its token
        unused)."""
        flight = self.flights[key]
        flight.waiting = False
        if flight.gone:
            self.retire(flight)
            return Step(key, None, "cancelled", len(flight.prompt))
        flight.produced += 1
        finish = "stop" if token in eos else ("length" if flight.produced >= flight.budget else None)
        if finish is not None:
            self.retire(flight)
        else:
            flight.next_ids = [token]
        return Step(key, token, finish, len(flight.prompt))

    def retire(self, flight: Flight) -> None:
        """``flight`` is done: its slot is free for the next request (which starts it afresh)."""
        del self.flights[flight.key]
        self.free.append(flight.slot)

    def stop(self) -> None:
        """The run is over: the replies still coming are taken (so no rank is left
        sending), then ``STOP`` goes down the pipeline."""
        while self.replies:
            self.replies.take()
        self.pending = settle(self.pending)
        if self.world > 1:
            import torch.distributed as dist

            dist.send(make_header(STOP, 0, 0, False), 1)
