"""``coinfer serve``: a model behind an OpenAI-compatible HTTP API on loopback.

The model is loaded for chat like ``open_local_chat``: on llama.cpp each conversation gets
its own ``--ctx`` cells (``--max-batch`` decoded together, ``--keep`` finished ones kept
for prefix reuse), and ``--max-batch`` is also how many queued requests the server hands
to the model at once."""

from __future__ import annotations

import argparse
import signal
import threading
from contextlib import suppress
from typing import Any

from coinfer.cli.common import add_model_flags, open_chat_from_args

__all__ = ["add_parser", "cmd_serve"]


def cmd_serve(args: argparse.Namespace) -> int:
    from coinfer.serve import ChatServer
    from coinfer.serve.process import READY_PREFIX

    chat = open_chat_from_args(
        args, args.model, n_ctx=args.ctx, parallel=args.max_batch, keep=args.keep, quiet=True
    )
    server = ChatServer(chat, host=args.host, port=args.port, max_batch=args.max_batch)
    try:
        server.start()
        print(f"{READY_PREFIX}{args.model} at {server.url}", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with suppress(KeyboardInterrupt):
            stop.wait()
    finally:
        server.stop()
        chat.close()
        chat.model.close()
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API")
    add_model_flags(
        p, default=None, ctx=8192, ctx_help="each conversation's window in tokens (default: %(default)s)"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (default: %(default)s)")
    p.add_argument(
        "--max-batch", type=int, default=8, help="requests decoded together (default: %(default)s)"
    )
    p.add_argument(
        "--keep",
        type=int,
        default=2,
        help="finished conversations whose caches are kept, so a request that repeats one's "
        "prefix (the same document, a growing chat) is not read again (default: %(default)s)",
    )
    p.set_defaults(func=cmd_serve)
