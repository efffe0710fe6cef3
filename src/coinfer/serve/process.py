"""``coinfer serve`` in a child process: a real OpenAI-compatible server on loopback that a
command starts, uses through HTTP and stops again.

The child prints one line, ``coinfer serve: MODEL at URL``, once it listens; until then
the parent waits (``startup_s``), and if the child dies first its last words become the
error. ``stop`` sends SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Collection, Sequence
from typing import Any

from coinfer.errors import ModelError

__all__ = ["READY_PREFIX", "ServerProcess", "stop_process"]

READY_PREFIX = "coinfer serve: "


class ServerProcess:
    """Start ``coinfer serve --model MODEL`` on a free loopback port; ``url`` once started.

    ``ctx``: each conversation's window; ``max_batch``: conversations decoded together (a
    local–remote protocol sends its remote one request at a time: 1); ``cores``: the CPU
    cores it may run on (``taskset``), as a machine of its own would have them."""

    def __init__(
        self,
        model: str,
        *,
        ctx: int | None = None,
        max_batch: int | None = None,
        extra_args: Sequence[str] = (),
        startup_s: float = 300.0,
        cores: Collection[int] | None = None,
    ) -> None:
        self.model = model
        sized = [
            *(["--ctx", str(ctx)] if ctx else []),
            *(["--max-batch", str(max_batch)] if max_batch else []),
        ]
        pinned = ["taskset", "-c", ",".join(str(c) for c in sorted(cores))] if cores else []
        self.args = [
            *pinned,
            sys.executable,
            "-m",
            "coinfer",
            "serve",
            "--model",
            model,
            "--port",
            "0",
            "--drain",  # stopped by its parent (``stop``): what is open ends at once, as told
            "0",
            *sized,
            *extra_args,
        ]
        self.startup_s = startup_s
        self.url = ""
        self._proc: subprocess.Popen[str] | None = None
        self._stderr: list[str] = []

    def start(self) -> ServerProcess:
        self._proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
        )
        threading.Thread(target=self._collect_stderr, daemon=True).start()
        ready: list[str] = []
        reader = threading.Thread(target=lambda: ready.append(self._first_line()), daemon=True)
        reader.start()
        reader.join(self.startup_s)
        line = ready[0] if ready else ""
        if not line.startswith(READY_PREFIX):
            self.stop()
            why = "".join(self._stderr[-5:]).strip() or f"no answer within {self.startup_s:g} s"
            raise ModelError(f"the local remote server for {self.model} did not start: {why}")
        self.url = line.rsplit(" at ", 1)[-1].strip()
        return self

    @property
    def pid(self) -> int:
        """The server's process id (once started)."""
        if self._proc is None:
            raise ModelError("the server is not started")
        return self._proc.pid

    def _first_line(self) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        return self._proc.stdout.readline()

    def _collect_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        for line in self._proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-50]

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            stop_process(self._proc)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """End a child server: asked to stop, killed if it has not within ``timeout`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
