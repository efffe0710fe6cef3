"""A batching session served (``BatchServed``): a request whose client goes away leaves
the queue even when the engine drops it without a word (as the collective engine drops
a request still waiting for its place in the batch)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Generator, Iterator

from coinfer.decoding.engine import Arrivals, BatchSession, Engine, Request
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import DecodeStats, Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.serve.batched import BatchServed
from coinfer.serve.schemas import read_body
from coinfer.testing import ScriptedModel
from tests.serve.events import Requests


class _OneAtATime(BatchSession):
    """Decodes its oldest request alone, a token per step once ``go`` is set; a waiting
    request that leaves is dropped without a response."""

    def __init__(self) -> None:
        super().__init__(_Engine(), {}, None, Learned())
        self.model = ScriptedModel(lambda prefix: 97, n_ctx=256)
        self.go = threading.Event()

    def stream(self, request: Request) -> Generator[Response, None, None]:  # pragma: no cover
        raise NotImplementedError

    def run(self, arrivals: Arrivals, sampling: SamplingParams) -> Iterator[Response]:
        waiting: deque[tuple[int, list[int], int]] = deque()
        produced = 0
        while True:
            waiting.extend(arrivals.joined())
            gone = arrivals.left()
            waiting = deque(w for w in waiting if w[0] not in gone)
            if not waiting:
                return
            key, _, budget = waiting[0]
            assert self.go.wait(10)
            produced += 1
            done = produced >= budget
            if done:
                waiting.popleft()
                produced = 0
            yield Response("a", [97], DecodeStats(1), "length" if done else None, key)


class _Engine(Engine):
    name = "one-at-a-time"
    parts = ()


def test_a_client_that_leaves_while_waiting_frees_its_place_in_the_queue() -> None:
    session = _OneAtATime()
    served = BatchServed(session, name="m", max_queue=8).start()
    requests = Requests(3)
    tickets = []
    for i in range(3):
        body = {"model": "m", "prompt": f"q{i}", "max_tokens": 3}
        tickets.append(served.submit(read_body("completion", body), requests.sink(i)))
    tickets[1].cancelled.set()  # its client goes away while the first decodes
    session.go.set()
    assert requests.ended(10)
    ends = requests.events
    assert [e.kind for e in ends[1]][-2:] == ["end", "done"] and ends[1][-2].finish == "cancelled"
    assert ends[0][-2].finish == "length" and ends[2][-2].finish == "length"
    assert served.depth == 0
    served.close()
