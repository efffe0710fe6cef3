"""``coinfer serve``: a model behind an OpenAI-compatible HTTP API (Starlette on uvicorn),
on loopback unless ``--host`` says otherwise.

``--engine plain`` decodes every request in one continuous batch (on llama.cpp each
conversation gets its own ``--ctx`` cells, ``--max-batch`` decoded together, ``--keep``
finished ones kept for prefix reuse). Every other engine serves up to ``--max-batch``
requests at once too: ``speculative`` (``--draft``) drafts inside that batch,
``collective`` (``--drafts`` voting) runs batched rounds; ``llmcad`` (its resident
``--draft`` model; one at a time under ``--memory-budget``) and the question-answering
engines ``minions`` (``--model`` reads the documents a request brings, ``--remote``
plans) and ``dragon`` (``--corpus``, with ``--cloud``'s) answer several requests on
threads whose forwards merge; ``jupiter`` (``--devices`` worker processes kept for every
request) keeps several in its pipeline.
``--config FILE.toml`` serves several, by name. With ``--api-key`` (or
``$COINFER_API_KEY``) every route but ``/health`` needs the key."""

from __future__ import annotations

import argparse
import os
import signal
import threading
from pathlib import Path
from typing import Any

from coinfer.cli.common import (
    DEFAULT_MODEL,
    add_draft_flags,
    add_model_flags,
    err,
)
from coinfer.errors import ConfigError

__all__ = ["add_parser", "cmd_serve"]

LOOPBACK = ("127.0.0.1", "::1", "localhost")
DRAIN_S = 25.0  # under Kubernetes' default 30 s between SIGTERM and SIGKILL
CACHE_RAM_MIB = 2048.0  # stored conversations' caches (llama-server's --cache-ram: 8192)


def _all_served(args: argparse.Namespace) -> dict[str, Any]:
    """Every served model: the flags' one, or each ``[[model]]`` table of ``--config``
    (its keys are the flags' names, ``max_batch`` for ``--max-batch``; the flags fill in
    what a table leaves out)."""
    if args.config is None:
        if args.model is None:
            raise ConfigError("name the model to serve with --model", hint="or several in --config FILE.toml")
        return _served(args)
    tables = _read_config(args.config)
    out: dict[str, Any] = {}
    for table in tables:
        unknown = set(table) - (set(vars(args)) - {"func", "config"})
        if unknown or "model" not in table:
            raise ConfigError(
                f"{args.config}: a [[model]] table needs 'model' and takes the flags' names, "
                f"not {', '.join(sorted(unknown)) or 'nothing'}",
                hint='e.g. model = "smollm2-135m", engine = "plain", max_batch = 8',
            )
        one = argparse.Namespace(**{**vars(args), **table})
        name = one.name or one.model
        if name in out:
            raise ConfigError(f"{args.config}: two models are served as {name!r}", hint="give each a name")
        out |= _served(one)
    return out


def _read_config(path: str) -> list[dict[str, Any]]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}", hint="a TOML file of [[model]] tables") from exc
    tables = data.get("model")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{path} holds no [[model]] tables", hint='add [[model]] with model = "NAME"')
    return tables


def _served(args: argparse.Namespace) -> dict[str, Any]:
    """The served model the flags describe, by the name clients send as ``model``: the
    ``--engine`` from the registry, its config and parts from the flags."""
    from coinfer.cli.engine_parts import PartsFromArgs, engine_config
    from coinfer.decoding.registry import get
    from coinfer.serve.engines import served

    name = args.name or args.model
    engine = get(args.engine)
    config = engine_config(engine, args, sampling=False)  # checked before any model loads
    parts = PartsFromArgs(args, serving=True)
    try:
        session = engine.open(parts.build(engine), config)
    except BaseException:
        parts.close()
        raise
    return {
        name: served(
            session, name=name, max_queue=args.max_queue, on_release=parts.close, lost_part=parts.lost_part
        )
    }


def cmd_serve(args: argparse.Namespace) -> int:
    from coinfer.serve import Server
    from coinfer.serve.process import READY_PREFIX

    key = args.api_key or os.environ.get("COINFER_API_KEY") or None
    if args.host not in LOOPBACK and not key:
        err(f"warning: serving on {args.host} with no API key: anyone who can reach it can use it")
    server = Server(_all_served(args), host=args.host, port=args.port, api_key=key)
    stop, hurry = threading.Event(), threading.Event()
    drain_s = 0.0
    try:
        server.start()
        print(f"{READY_PREFIX}{', '.join(server.served)} at {server.url}", flush=True)
        _on_stop_signals(stop, hurry)  # from here Ctrl-C, as SIGTERM, sets ``stop``: no KeyboardInterrupt
        stop.wait()
        drain_s = args.drain
        if server.open_requests and drain_s > 0:
            err(f"coinfer serve: draining: {server.open_requests} requests open, up to {drain_s:g} s "
                "(new ones get 503; send the signal again to stop now)")  # fmt: skip
    finally:
        # each served model closes its session and the parts the flags opened
        server.stop(drain_s, hurry=hurry)
    return 0


def _mebibytes(text: str) -> float:
    """``--cache-ram``: a size in MiB, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"expected MiB, 0 or more, got {text!r}")
    return value


def _on_stop_signals(stop: threading.Event, hurry: threading.Event) -> None:
    """SIGTERM or Ctrl-C sets ``stop`` (a graceful stop: the drain); a second one ``hurry``."""

    def handle(*_: object) -> None:
        (hurry if stop.is_set() else stop).set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)


def add_parser(sub: Any) -> None:
    from coinfer.decoding.registry import names

    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API")
    add_model_flags(
        p, default=None, required=False, ctx=8192,
        ctx_help="each conversation's window in tokens (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--engine", default="plain", choices=names(), help="how requests are decoded (default: plain)"
    )
    add_draft_flags(p)
    _add_engine_flags(p)
    p.add_argument("--name", default=None, help="the model name clients send (default: --model)")
    p.add_argument("--config", default=None, help="a TOML file of [[model]] tables: several models served")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (default: %(default)s)")
    p.add_argument(
        "--api-key", default=None, help="require this bearer key (default: $COINFER_API_KEY, else none)"
    )
    p.add_argument(
        "--max-batch", type=int, default=8, help="requests decoded together (default: %(default)s)"
    )
    p.add_argument(
        "--drain", type=float, default=DRAIN_S,
        help="on SIGTERM or Ctrl-C, seconds the open requests get to finish while new ones get 503 "
        "and /health says draining; a second signal stops at once (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--max-queue", type=int, default=64,
        help="requests waiting or running before the server answers 429 (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--keep",
        type=int,
        default=2,
        help="finished conversations whose caches are kept, so a request that repeats one's "
        "prefix (the same document, a growing chat) is not read again (default: %(default)s)",
    )
    p.add_argument(
        "--cache-ram", type=_mebibytes, default=CACHE_RAM_MIB, metavar="MIB",
        help="host memory (MiB) for the caches of finished conversations that give way in the model, "
        "so a chat that comes back after others took the slots is not read again (0: none; default: "
        "%(default)g)",
    )  # fmt: skip
    p.add_argument(
        "--prefill-chunk", type=int, default=512,
        help="prompt tokens read per step between decoding steps, so a long prompt never stalls "
        "the running streams (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--admission", choices=("shortest", "arrival"), default="shortest",
        help="which waiting request takes a free slot: the one with the fewest prompt tokens to read "
        "(a request passed over --max-batch times goes next), or the oldest (default: %(default)s)",
    )  # fmt: skip
    p.set_defaults(func=cmd_serve)


def _add_engine_flags(p: argparse.ArgumentParser) -> None:
    """What one engine or another takes: drafts, the remote, the corpus and the cloud."""
    from coinfer.cli.rag import RAG_DEFAULTS

    p.add_argument(
        "--drafts", default="qwen2.5-coder-0.5b,ngram",
        help="collective: comma-separated drafts, each ngram or a model (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--pipeline", action="store_true", help="collective: draft on another core while the target verifies"
    )
    p.add_argument(
        "--every-draft", action="store_true", help="collective: no gate; every draft drafts every round"
    )
    p.add_argument(
        "--batch-floor", type=float, default=None,
        help="collective, speculative: in a batch, drafts are cut so that every request keeps this "
        "share of its plain decoding rate (0: the batch's best throughput; default: collective 0.97, "
        "speculative 0)",
    )  # fmt: skip
    p.add_argument(
        "--protocol", default="minions", choices=["minions", "minion"],
        help="minions: the protocol; --model is the local model that reads each request's documents",
    )  # fmt: skip
    p.add_argument("--remote", default=DEFAULT_MODEL, help="minions: the remote model (default: %(default)s)")
    p.add_argument("--remote-base-url", default=None, help="minions: its OpenAI-compatible API (default: "
                   "--remote served here on loopback)")  # fmt: skip
    p.add_argument(
        "--remote-api-key", default=None, help="minions: the remote's key (default: $OPENAI_API_KEY)"
    )
    p.add_argument("--remote-ctx", type=int, default=32768, help="minions: the loopback remote's window")
    p.add_argument("--corpus", default=None, help="dragon: this device's folder of documents")
    p.add_argument(
        "--cloud", default=None, help="dragon: HOST:PORT of `coinfer rag cloud` ($COINFER_LINK_TOKEN)"
    )
    p.set_defaults(**RAG_DEFAULTS)
    p.add_argument("--devices", type=int, default=2, help="jupiter: devices (processes) in the pipeline")
    p.add_argument("--cores-per-device", type=int, default=1, help="jupiter: cores each device uses")
    p.add_argument(
        "--memory", default=None,
        help="jupiter: memory budget per device, e.g. 1.5,1.5 (GB) or 800M: the layers are planned "
        "under it and, where the OS allows (root, a memory cgroup), each device is held to it",
    )  # fmt: skip
    p.add_argument(
        "--decode", default="naive", choices=["naive", "outline", "auto"],
        help="jupiter: naive continues the chat; outline and auto answer a list question point by point",
    )  # fmt: skip
