"""Several ``coinfer serve`` replicas behind one HAProxy (Debian's ``haproxy`` package):
``coinfer balance --replica HOST:PORT …``.

What the configuration does, and why:

* **A conversation sticks to the replica holding its prefix.** The key is the
  ``X-Coinfer-Conversation`` header where a client sends one, else the first message of a
  chat (or the start of a completion's prompt). A chat grows at its end, so every turn of
  one conversation has the same key, and requests that open alike (one document, one
  system prompt) meet the replica that has already read that opening. Replicas sit on a
  consistent-hash ring: a replica that goes down moves only its own keys.
* **Requests spread.** Different keys spread over the ring, and a bounded load
  (``hash-balance-factor``) sends a key to the next replica when its own has more than
  its share of the requests in flight: one shared system prompt cannot pile every client
  onto one replica.
* **A replica that dies costs only its own clients.** Health checks on ``/health`` take
  it out of the ring within a second; a request that finds it gone before then is sent
  to another (``redispatch``); the streams it was serving end with a broken connection,
  which the ``openai`` client raises as an error. The other replicas' streams go on.
* **A replica stopped gracefully costs nobody.** A replica given SIGTERM drains
  (``coinfer serve --drain``): its ``/health`` answers 503, so the checks take it out,
  and a request that reaches it meanwhile gets a 503, which HAProxy retries on another
  (``retry-on 503``: such a 503 comes before anything was generated). Its streams run to
  their end.
* The balancer passes ``Authorization`` through: each replica checks its own key. It adds
  ``X-Coinfer-Replica``: the replica that answered, for logs and for the tests.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from coinfer.errors import ConfigError, TransportError
from coinfer.serve.process import stop_process
from coinfer.transport.ports import free_loopback_port

__all__ = [
    "AFFINITY_HEADER",
    "REPLICA_HEADER",
    "Balancer",
    "check_config",
    "haproxy_binary",
    "haproxy_config",
    "parse_replica",
]

AFFINITY_HEADER = "X-Coinfer-Conversation"
REPLICA_HEADER = "X-Coinfer-Replica"
KEY_BYTES = 512  # how much of a first message or prompt makes the key
INSTALL_HINT = "install Debian's haproxy package (apt-get install haproxy), or put haproxy on PATH"


def parse_replica(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or a URL ``http://HOST:PORT/...``) as a pair; a clear error otherwise."""
    bare = text.split("://", 1)[-1].split("/", 1)[0]
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"a replica is HOST:PORT, got {text!r}", hint="e.g. --replica 127.0.0.1:8001")
    return host, int(port)


def _key_rules() -> list[str]:
    """The affinity key: the header, else a chat's first message, else a prompt's start."""
    unset = "unless { var(txn.key) -m found }"
    paths = ("$.messages[0].content", "$.prompt")
    body = [f"req.body,json_query('{path}'),bytes(0,{KEY_BYTES})" for path in paths]
    return [
        f"http-request set-var(txn.key) req.hdr({AFFINITY_HEADER.lower()})",
        *(f"http-request set-var(txn.key) {sample} {unset}" for sample in body),
    ]


def haproxy_config(
    replicas: Sequence[tuple[str, int]],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    check_ms: int = 500,
    balance_factor: int = 150,
    max_body_kb: int = 256,
) -> str:
    """An HAProxy configuration that listens on ``host:port`` and balances ``replicas``.

    ``check_ms``: how often each replica's ``/health`` is asked (one failed check takes it
    out); ``balance_factor``: the most a replica holds, in percent of the average in
    flight, before its keys spill to the next one; ``max_body_kb``: how much of a request
    body the balancer buffers to read the key (a larger body without the header is balanced
    round robin; each replica still limits what it accepts)."""
    if not replicas:
        raise ConfigError("no replica to balance", hint="give --replica HOST:PORT at least once")
    if balance_factor < 100:
        raise ConfigError(f"balance_factor is a percentage >= 100, got {balance_factor}")
    servers = [
        f"    server r{i} {h}:{p} check inter {check_ms}ms fall 1 rise 2 weight 100"
        for i, (h, p) in enumerate(replicas)
    ]
    lines = [
        "global",
        "    log stderr format raw local0 warning",
        f"    tune.bufsize {max(16384, (max_body_kb + 16) * 1024)}",
        "defaults",
        "    mode http",
        "    log global",
        "    option httplog",
        "    timeout connect 2s",
        "    timeout client 15m",
        "    timeout server 15m",  # a long stream between two tokens
        "    timeout http-request 30s",
        "frontend coinfer",
        f"    bind {host}:{port}",
        "    option http-buffer-request",
        *(f"    {rule}" for rule in _key_rules()),
        f"    http-response set-header {REPLICA_HEADER} %s",
        "    default_backend replicas",
        "backend replicas",
        "    balance hash var(txn.key)",
        "    hash-type consistent sdbm avalanche",
        f"    hash-balance-factor {balance_factor}",
        "    option httpchk GET /health",
        "    option redispatch 1",
        "    retries 2",
        # a 503 is a replica that takes nothing now (draining to stop, or a part lost) and
        # has generated nothing: the request goes to another (its body is buffered above)
        "    retry-on conn-failure empty-response 503",
        *servers,
    ]
    return "\n".join(lines) + "\n"


def haproxy_binary() -> str:
    found = shutil.which("haproxy") or next(
        (p for p in ("/usr/sbin/haproxy", "/usr/local/sbin/haproxy") if Path(p).exists()), None
    )
    if found is None:
        raise ConfigError("haproxy is not installed", hint=INSTALL_HINT)
    return found


def check_config(text: str) -> None:
    """``haproxy -c`` on ``text``: a ``ConfigError`` with HAProxy's words if it refuses it."""
    with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
        f.write(text)
    try:
        done = subprocess.run([haproxy_binary(), "-c", "-f", f.name], capture_output=True, text=True)
    finally:
        Path(f.name).unlink(missing_ok=True)
    if done.returncode != 0:
        raise ConfigError(f"haproxy refused the configuration: {(done.stdout + done.stderr).strip()}")


class Balancer:
    """HAProxy in a child process over ``replicas``; ``url``: its OpenAI base URL once
    started (port 0: a free one). ``stop`` ends it; the replicas are the caller's."""

    def __init__(self, replicas: Sequence[tuple[str, int]], *, host: str = "127.0.0.1", port: int = 0,
                 check_ms: int = 500, startup_s: float = 20.0) -> None:  # fmt: skip
        self.replicas, self.host, self.check_ms, self.startup_s = list(replicas), host, check_ms, startup_s
        self.port = port or free_loopback_port()
        self.config = haproxy_config(self.replicas, host=host, port=self.port, check_ms=check_ms)
        self._dir = tempfile.TemporaryDirectory(prefix="coinfer-haproxy-")
        self._proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> Balancer:
        path = Path(self._dir.name) / "haproxy.cfg"
        path.write_text(self.config)
        self._proc = subprocess.Popen([haproxy_binary(), "-db", "-f", str(path)], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, bufsize=1)  # fmt: skip
        threading.Thread(target=self._collect, daemon=True).start()
        deadline = time.monotonic() + self.startup_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self.stop()
                raise TransportError(f"haproxy stopped at start: {' '.join(self.log[-3:]).strip()}")
            try:
                socket.create_connection((self.host, self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise TransportError(f"haproxy did not listen on {self.host}:{self.port} within {self.startup_s:g} s")

    def wait(self) -> int:
        """Until HAProxy exits (the CLI's foreground); its exit status."""
        assert self._proc is not None
        return self._proc.wait()

    def _collect(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            self.log.append(line.rstrip())
            del self.log[:-200]

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            stop_process(self._proc)
        self._dir.cleanup()

    def __enter__(self) -> Balancer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
