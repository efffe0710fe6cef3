"""Run code written by a remote model in a locked-down child process.

``run(code, inputs, timeout_s=…, memory_mb=…)`` executes ``code`` with ``inputs`` (JSON
data) bound as global variables and returns the JSON value the code leaves in the global
``result``, with what it printed. Anything it may not do or that goes wrong comes back
as a ``SandboxError`` whose message is readable by a person and by the remote model that
wrote the code (``kind``: ``refused``, ``error``, ``timeout``, ``memory``, ``output``,
``crashed``), so a protocol can send it back for a bounded number of retries.

The child (``child.py`` here, a script that imports nothing of coinfer) runs ``python -I
-S`` (no site packages, no environment) in its own session and an empty working
directory, and stacks four layers: a static check of the syntax tree, restricted
builtins and imports, an audit hook that refuses files, sockets, processes and frame
access however they are reached, and resource limits (CPU seconds, address space, no
file writes). Here the parent adds a wall-clock timeout that kills the child's whole
process group and reads back at most ``output_limit`` characters. Nothing from the child
is unpickled: requests and replies are JSON. Trusted helper modules (the MinionS
chunking API) are passed as source in ``modules`` and built before the lockdown.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from coinfer.errors import ConfigError, SandboxError

__all__ = ["DEFAULT_MODULES", "SandboxResult", "run"]

CHILD = Path(__file__).with_name("child.py")

DEFAULT_MODULES = (
    "re", "json", "math", "collections", "itertools", "functools", "textwrap", "statistics",
    "heapq", "bisect", "datetime", "fractions", "decimal", "random", "difflib", "unicodedata",
    "dataclasses",
)  # fmt: skip
# Left out on purpose: modules that reach attributes by name (operator.attrgetter,
# string.Formatter.get_field) or evaluate strings (typing.get_type_hints).

STARTUP_S = 2.0  # wall-clock grace for the interpreter to start, on top of timeout_s


@dataclass(frozen=True)
class SandboxResult:
    """What the code left in ``result`` (JSON data), what it printed, and how long it took."""

    value: Any
    stdout: str
    elapsed_s: float


def run(
    code: str,
    inputs: Mapping[str, Any] | None = None,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    modules: Mapping[str, str] | None = None,
    allowed: tuple[str, ...] = DEFAULT_MODULES,
    output_limit: int = 4_000_000,
) -> SandboxResult:
    """Run ``code`` in the sandbox; ``SandboxError`` (with ``kind``) when it is refused or fails.

    ``inputs``: JSON data bound as globals. ``modules``: trusted module sources, by name,
    importable by the code (and only those and ``allowed`` standard modules).
    """
    _check_limits(timeout_s, memory_mb, output_limit)
    sources = dict(modules or {})
    request = {
        "code": code,
        "inputs": dict(inputs or {}),
        "modules": sources,
        "allowed": [*allowed, *[n for n in sources if n not in allowed]],
        "cpu_s": max(1, int(timeout_s + 0.999)),
        "memory_mb": memory_mb,
        "output_limit": output_limit,
    }
    try:
        payload = json.dumps(request).encode()
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"sandbox inputs must be JSON data: {exc}") from exc
    started = time.perf_counter()
    reply, returncode, timed_out = _communicate(payload, timeout_s + STARTUP_S, output_limit)
    elapsed = time.perf_counter() - started
    return _result(reply, returncode, timed_out, elapsed, timeout_s=timeout_s, memory_mb=memory_mb)


def _check_limits(timeout_s: float, memory_mb: int, output_limit: int) -> None:
    if timeout_s <= 0 or memory_mb < 32 or output_limit < 1:
        raise ConfigError(
            f"sandbox limits must be positive (timeout_s={timeout_s}, memory_mb={memory_mb} >= 32, "
            f"output_limit={output_limit})"
        )


def _communicate(payload: bytes, wall_s: float, output_limit: int) -> tuple[bytes, int, bool]:
    """Start the child, feed it, read back at most what a reply within ``output_limit``
    characters can take (result and printed text, 4 bytes a character, and the envelope)."""
    with tempfile.TemporaryDirectory(prefix="coinfer-sandbox-") as cwd:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-S", str(CHILD)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=cwd,
            env={},
            start_new_session=True,
        )
        out: dict[str, bytes] = {}
        threads = [
            threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True),
            threading.Thread(target=_drain, args=(proc.stdout, 8 * output_limit + 4096, out), daemon=True),
        ]
        for t in threads:
            t.start()
        timed_out = False
        try:
            proc.wait(timeout=wall_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc)
        for t in threads:
            t.join(timeout=5)
        return out.get("data", b""), proc.returncode, timed_out


def _feed(pipe: IO[bytes] | None, payload: bytes) -> None:
    try:
        assert pipe is not None
        pipe.write(payload)
        pipe.close()
    except (BrokenPipeError, OSError):
        pass  # the child died early: its exit status says why


def _drain(pipe: IO[bytes] | None, limit: int, out: dict[str, bytes]) -> None:
    """Read up to ``limit`` bytes; past that, stop reading (the child is killed)."""
    assert pipe is not None
    chunks, size = [], 0
    while size <= limit:
        chunk = pipe.read(65536)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    out["data"] = b"".join(chunks)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _result(
    raw: bytes, returncode: int, timed_out: bool, elapsed: float, *, timeout_s: float, memory_mb: int
) -> SandboxResult:
    if timed_out or returncode in (-signal.SIGXCPU, -signal.SIGKILL) and not raw:
        raise SandboxError(f"the code ran past its time limit of {timeout_s:g} s", kind="timeout")
    try:
        reply = json.loads(raw)
    except ValueError:
        if returncode == -signal.SIGSEGV or returncode == -signal.SIGABRT or raw == b"":
            raise SandboxError(
                f"the code crashed the sandbox (exit status {returncode}); it may have passed its "
                f"memory limit of {memory_mb} MB",
                kind="crashed",
            ) from None
        raise SandboxError("the code's output passed the sandbox's limit", kind="output") from None
    if reply.get("ok"):
        return SandboxResult(reply.get("result"), reply.get("stdout", ""), elapsed)
    message, kind = reply.get("message", "unknown failure"), reply.get("kind", "error")
    if message.startswith("MemoryError"):
        message, kind = f"the code passed its memory limit of {memory_mb} MB", "memory"
    raise SandboxError(message, kind=kind)
