"""What a served engine tells each request, kept for a test: every ``Event`` per request,
and whether its last (``done`` or ``error``) has come."""

from __future__ import annotations

import threading
from collections.abc import Callable

from coinfer.serve.served import Event


class Requests:
    """``count`` requests' sinks: ``sink(i)`` for request i, its events in ``events[i]``."""

    def __init__(self, count: int) -> None:
        self.events: list[list[Event]] = [[] for _ in range(count)]
        self._ended = [threading.Event() for _ in range(count)]

    def sink(self, i: int) -> Callable[[Event], None]:
        def put(event: Event) -> None:
            self.events[i].append(event)
            if event.kind in ("done", "error"):
                self._ended[i].set()

        return put

    def ended(self, timeout: float) -> bool:
        """Whether every request has had its last event within ``timeout`` seconds each."""
        return all(e.wait(timeout) for e in self._ended)

    def last(self, i: int) -> Event | None:
        """Request i's last event, once it has ended."""
        return self.events[i][-1] if self._ended[i].is_set() else None
