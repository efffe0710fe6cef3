"""``coinfer demo``: every engine once on the embedded default models, each beside its
baseline, in one table; the traces go to ``--out`` for ``coinfer view``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from coinfer.cli.common import err

__all__ = ["add_parser", "cmd_demo"]


def cmd_demo(args: argparse.Namespace) -> int:
    from coinfer.bench.demo import DemoConfig, check_out, demo_table, elapsed, run_demo

    out = Path(args.out)
    check_out(out)
    config = DemoConfig(out=out, quick=args.quick)
    start = time.perf_counter()
    err(f"coinfer demo: every engine beside its baseline{' (quick)' if args.quick else ''}; traces in {out}/")
    rows = run_demo(
        config, on_row=lambda r: err(f"  {r.engine}: {'failed' if r.error else 'done'} ({elapsed(start)})")
    )
    print(demo_table(rows))
    traces = [r.trace for r in rows if r.trace]
    if traces:
        print(f"\nsee what each did: coinfer view {traces[0]} (and the other {len(traces) - 1} in {out}/)")
    return 1 if any(r.error for r in rows) else 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("demo", help="run every engine once beside its baseline, on the default models")
    p.add_argument("--quick", action="store_true", help="short answers: a minute or two")
    p.add_argument(
        "--out", default="coinfer-demo", help="folder for the traces and results (default: %(default)s)"
    )
    p.set_defaults(func=cmd_demo)
