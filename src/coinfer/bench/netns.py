"""A bandwidth-limited link for the benchmarks: a network namespace joined to this one by a
veth pair, ``tbf`` shaping both ends (this kernel has ``tbf`` but no ``netem``; latency
comes from ``LatencyRelay``).

``ShapedLink(rate_mbit)`` makes namespace ``coinfer-<pid>``, the pair ``cfh<pid>`` (here,
``HOST``) and ``cfn<pid>`` (there, ``PEER``), and a token bucket of ``rate_mbit`` on each
end; a process started with ``prefix + argv`` runs in the namespace and is reached at
``PEER``. Closing deletes the namespace, which takes the pair with it. Needs root and
iproute2; ``ConfigError`` says so otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from coinfer.errors import ConfigError

__all__ = ["HOST", "PEER", "ShapedLink"]

HOST, PEER = "10.231.0.1", "10.231.0.2"
_MASK = "30"


def _run(*argv: str) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise ConfigError(
            f"{' '.join(argv)} failed: {proc.stderr.strip() or proc.returncode}",
            hint="bandwidth limits need root with CAP_NET_ADMIN and the tbf qdisc"
            " (leave --bandwidth-mbit out otherwise)",
        )


def _ip(*args: str) -> None:
    _run("ip", *args)


def tbf(rate_mbit: float) -> list[str]:
    """The ``tbf`` arguments for ``rate_mbit``: a burst of 10 ms of traffic (at least
    16 KiB) and room for 500 ms of queue, so that TCP is slowed rather than dropped."""
    burst = max(16384, int(rate_mbit * 1e6 / 8 / 100))
    return ["tbf", "rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "500ms"]


class ShapedLink:
    """A namespace across a veth pair shaped to ``rate_mbit`` each way."""

    def __init__(self, rate_mbit: float) -> None:
        if rate_mbit <= 0:
            raise ConfigError(f"the bandwidth must be positive, got {rate_mbit} Mbit/s")
        if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
            raise ConfigError(
                "bandwidth limits need root and iproute2 (ip, tc)",
                hint="run the bench as root, or leave --bandwidth-mbit out",
            )
        self.rate_mbit = rate_mbit
        pid = os.getpid()
        self.name, self.host_if, self.peer_if = f"coinfer-{pid}", f"cfh{pid}", f"cfn{pid}"
        self.prefix = ["ip", "netns", "exec", self.name]
        self._made = False

    def open(self) -> ShapedLink:
        try:
            _ip("netns", "add", self.name)
            self._made = True
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.peer_if)
            _ip("link", "set", self.peer_if, "netns", self.name)
            _ip("addr", "add", f"{HOST}/{_MASK}", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("-n", self.name, "addr", "add", f"{PEER}/{_MASK}", "dev", self.peer_if)
            _ip("-n", self.name, "link", "set", self.peer_if, "up")
            _ip("-n", self.name, "link", "set", "lo", "up")
            for inside, dev in (([], self.host_if), (self.prefix, self.peer_if)):
                _run(*inside, "tc", "qdisc", "add", "dev", dev, "root", *tbf(self.rate_mbit))
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._made:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
            subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, timeout=30)
            self._made = False

    def __enter__(self) -> ShapedLink:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
