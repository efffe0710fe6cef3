"""A user-space TCP relay that adds latency: this kernel has no ``netem``.

``LatencyRelay(target, rtt_s=…, jitter_s=…)`` listens on loopback and forwards every
connection to ``target``; each chunk read in either direction is delivered half the
round-trip time later, plus a uniform jitter in ``[-jitter_s/2, +jitter_s/2]`` (never
earlier than the chunk before it, so a stream keeps its order). The bench puts one
between the device and the cloud: the round trip grows by ``rtt_s`` on average, and
bandwidth is left to ``tbf`` on a veth pair where the bench makes one.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
import time

__all__ = ["LatencyRelay"]

_CHUNK = 1 << 16


class LatencyRelay:
    """Forwards ``127.0.0.1:port`` (``port`` once started) to ``target`` (host, port)."""

    def __init__(
        self, target: tuple[str, int], *, rtt_s: float, jitter_s: float = 0.0, seed: int = 0
    ) -> None:
        if rtt_s < 0 or jitter_s < 0 or jitter_s > rtt_s:
            raise ValueError(f"need 0 <= jitter_s <= rtt_s, got rtt {rtt_s}, jitter {jitter_s}")
        self.target, self.rtt_s, self.jitter_s = target, rtt_s, jitter_s
        self._random = random.Random(seed)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="latency-relay", daemon=True)
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    def start(self) -> LatencyRelay:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._connection, "127.0.0.1", 0), self._loop
        ).result(timeout=10)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> LatencyRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _one_way(self) -> float:
        jitter = self._random.uniform(-self.jitter_s / 2, self.jitter_s / 2) if self.jitter_s else 0.0
        return max(0.0, self.rtt_s / 2 + jitter)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Copy one direction, each chunk held back by the one-way delay, in order."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                writer.write(data)
                await writer.drain()
            with contextlib.suppress(OSError):
                writer.write_eof()

        sender = asyncio.ensure_future(deliver())
        last_due = 0.0
        try:
            while data := await reader.read(_CHUNK):
                last_due = max(last_due, time.monotonic() + self._one_way())
                queue.put_nowait((last_due, data))
        except OSError:
            pass
        finally:
            queue.put_nowait((last_due, b""))
            with contextlib.suppress(Exception):
                await sender
            writer.close()
