"""The ``coinfer`` command: one module per subcommand, flags become config objects and
engine calls; nothing else lives here. A user's mistake prints one line and a hint."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Sequence

from coinfer import __version__
from coinfer.cli import balance, bench, demo, edge, generate, minions, models, rag, serve, view
from coinfer.cli.common import Parser, err
from coinfer.errors import CoinferError

__all__ = ["build_parser", "main"]


def build_parser() -> Parser:
    parser = Parser(
        prog="coinfer", description="Collaborative inference between small and large language models."
    )
    parser.add_argument("--version", action="version", version=f"coinfer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in (models, generate, minions, rag, edge, serve, balance, view, demo, bench):
        command.add_parser(sub)
    return parser


class _WarningLine(logging.Handler):
    """The library's warnings as ``coinfer: warning: …`` lines on stderr (llama.cpp's own
    errors, which say why a model did not load, as ``llama.cpp: …``)."""

    def emit(self, record: logging.LogRecord) -> None:
        source = "llama.cpp" if record.name == "coinfer.llama_cpp" else "coinfer: warning"
        err(f"{source}: {record.getMessage()}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    library = logging.getLogger("coinfer")
    if not library.handlers:
        library.addHandler(_WarningLine(logging.WARNING))
        library.propagate = False
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main else None  # stops our servers too
    try:
        return int(args.func(args) or 0)
    except CoinferError as exc:
        first, _, _ = str(exc.args[0] if exc.args else exc).partition("\n")
        err(f"coinfer: error: {first}")
        if exc.hint:
            err(f"hint: {exc.hint}")
        return 2
    except KeyboardInterrupt:
        err("coinfer: interrupted")
        return 130
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C: every ``finally`` runs, child servers included."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
