"""``coinfer view run.json``: a trace written by ``--trace`` as a static page (the
tokens coloured by where they came from, the rounds, each engine's own record), written
next to the trace and opened in the browser."""

from __future__ import annotations

import argparse
import webbrowser
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "cmd_view"]


def cmd_view(args: argparse.Namespace) -> int:
    from coinfer.decoding.trace import load_trace, origin_counts
    from coinfer.serve.viewer import write_page

    trace = load_trace(args.trace)
    out = write_page(trace, args.out or Path(args.trace).with_suffix(".html"))
    counts = ", ".join(f"{n} {origin}" for origin, n in origin_counts(trace).items() if n)
    print(f"{trace['engine']} · {trace['model']}: {len(trace['steps'])} steps; tokens: {counts or 'none'}")
    print(f"page: {out}")
    if not args.no_open:
        webbrowser.open(out.resolve().as_uri())
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("view", help="show a trace written by --trace as a page")
    p.add_argument("trace", help="the JSON file written by generate|minions|rag ask|edge launch --trace")
    p.add_argument("--out", default=None, help="where to write the page (default: the trace's name, .html)")
    p.add_argument("--no-open", action="store_true", help="write the page without opening a browser")
    p.set_defaults(func=cmd_view)
