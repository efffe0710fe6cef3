"""``coinfer balance --replica HOST:PORT --replica …``: several ``coinfer serve`` replicas
behind one HAProxy (``coinfer.serve.balancer``), in the foreground until Ctrl-C;
``--print-config`` writes the configuration for an HAProxy you run yourself."""

from __future__ import annotations

import argparse
from contextlib import suppress
from typing import Any

from coinfer.cli.common import err

__all__ = ["add_parser", "cmd_balance"]


def cmd_balance(args: argparse.Namespace) -> int:
    from coinfer.serve.balancer import Balancer, check_config, haproxy_config, parse_replica

    replicas = [parse_replica(r) for r in args.replica or ()]
    if args.print_config:
        text = haproxy_config(replicas, host=args.host, port=args.port, check_ms=args.check_ms)
        if args.check:
            check_config(text)
        print(text, end="")
        return 0
    balancer = Balancer(replicas, host=args.host, port=args.port, check_ms=args.check_ms)
    with balancer:
        print(f"coinfer balance: {len(replicas)} replicas at {balancer.url}", flush=True)
        with suppress(KeyboardInterrupt):
            status = balancer.wait()
            err(f"coinfer balance: haproxy exited ({status}): {' '.join(balancer.log[-3:])}")
            return 1
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("balance", help="put several `coinfer serve` replicas behind one HAProxy")
    p.add_argument(
        "--replica", action="append", metavar="HOST:PORT", help="a running `coinfer serve` (repeat it)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (default: %(default)s)")
    p.add_argument("--check-ms", type=int, default=500, help="ask each replica's /health every N ms")
    p.add_argument("--print-config", action="store_true", help="print haproxy.cfg instead of running it")
    p.add_argument("--check", action="store_true", help="with --print-config: have haproxy -c check it")
    p.set_defaults(func=cmd_balance)
