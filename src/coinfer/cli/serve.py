"""``coinfer serve``: a model behind an OpenAI-compatible HTTP API (Starlette on uvicorn),
on loopback unless ``--host`` says otherwise.

``--engine plain`` decodes every request in one continuous batch (on llama.cpp each
conversation gets its own ``--ctx`` cells, ``--max-batch`` decoded together, ``--keep``
finished ones kept for prefix reuse); ``--engine speculative`` (``--draft``), ``llmcad``
(its resident ``--draft`` model) and ``collective`` (``--drafts`` voting) serve one
request at a time, as do the question-answering engines ``minions`` (``--model`` reads the
documents a request brings, ``--remote`` plans) and ``dragon`` (``--corpus``, with
``--cloud``'s), and ``jupiter`` (``--devices`` worker processes kept for every request).
``--config FILE.toml`` serves several, by name. With ``--api-key`` (or
``$COINFER_API_KEY``) every route but ``/health`` needs the key."""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from coinfer.cli.common import (
    DEFAULT_MODEL,
    add_draft_flags,
    add_model_flags,
    err,
    load_from_args,
    open_chat_from_args,
)
from coinfer.errors import ConfigError

__all__ = ["add_parser", "cmd_serve"]

LOOPBACK = ("127.0.0.1", "::1", "localhost")
_CAPTURED_SPANS = (256, 512, 1024)  # contexts a server's first requests reach (see HFStaticModel)


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
    """The served model the flags describe, by the name clients send as ``model``."""
    from coinfer.serve import engines

    name = args.name or args.model
    if args.engine == "plain":
        chat = open_chat_from_args(
            args, args.model, n_ctx=args.ctx, parallel=args.max_batch, keep=args.keep, quiet=True
        )
        _captured(chat.model, range(1, args.max_batch + 1))
        return {name: engines.plain_served(chat, name=name, max_queue=args.max_queue)}
    if args.engine == "minions":
        return {name: _minions(args, name)}
    if args.engine == "dragon":
        return {name: _dragon(args, name)}
    if args.engine == "jupiter":
        return {name: _jupiter(args, name)}
    if args.engine == "collective":
        from coinfer.engines.collective import CollectiveConfig

        CollectiveConfig(batch_floor=args.batch_floor, max_batch=args.max_batch)  # checked before loading
    options: dict[str, Any] = {"hidden_states": True} if args.draft.startswith("heads:") else {}
    batches = range(1, (args.max_batch or 1) + 1) if args.engine == "collective" else (1,)
    target = _loaded(args, None, batches, **options)
    common = {"name": name, "max_queue": args.max_queue, "draft_tokens": args.draft_tokens}
    if args.engine == "llmcad":
        from coinfer.cli.generate import draft_model_name

        draft = _loaded(args, draft_model_name(args), (1,))
        return {name: engines.llmcad_served(target, draft, **common)}
    if args.engine == "collective":
        from coinfer.engines.collective import GateConfig

        specs = [d.strip() for d in args.drafts.split(",") if d.strip()]
        drafts = [_drafter(args, target, spec, batches) for spec in specs]
        gate = None if args.every_draft else GateConfig()
        knobs = {"pipeline": args.pipeline, "gate": gate, "max_batch": args.max_batch}
        knobs["batch_floor"] = args.batch_floor
        return {name: engines.collective_served(target, drafts, **knobs, **common)}
    return {name: engines.speculative_served(target, _drafter(args, target, args.draft), **common)}


def _minions(args: argparse.Namespace, name: str) -> Any:
    """Minion/MinionS: ``--model`` is the local model that reads each request's documents;
    the remote is ``--remote-base-url``'s, or ``--remote`` served here on loopback."""
    from coinfer.chat import OpenAIChat
    from coinfer.engines import minions
    from coinfer.serve import engines
    from coinfer.serve.process import ServerProcess

    config = minions.MinionConfig() if args.protocol == "minion" else minions.MinionsConfig()
    server, url = None, args.remote_base_url
    if url is None:
        server = ServerProcess(args.remote, ctx=args.remote_ctx, max_batch=1).start()
        url = server.url
    remote = OpenAIChat(args.remote, base_url=url, api_key=args.remote_api_key)
    local = open_chat_from_args(args, args.model, n_ctx=args.ctx, parallel=args.max_batch, keep=0, quiet=True)

    def release() -> None:
        local.close()
        local.model.close()
        if server is not None:
            server.stop()

    return engines.minions_served(
        local, remote, config, name=name, max_queue=args.max_queue, on_release=release
    )


def _dragon(args: argparse.Namespace, name: str) -> Any:
    """DRAGON: ``--model`` decodes on this device from ``--corpus``, with ``--cloud``'s."""
    from coinfer.cli.rag import cloud_link, corpus_from_args, dragon_knobs
    from coinfer.serve import engines

    if args.corpus is None:
        raise ConfigError(
            "--engine dragon needs this device's --corpus", hint="a folder of .txt or .md files"
        )
    corpus = corpus_from_args(args)
    link, channel = cloud_link(args)
    model = load_from_args(args, quiet=True)
    return engines.dragon_served(model, corpus, name=name, cloud=link, channel=channel,
                                 max_queue=args.max_queue, **dragon_knobs(args))  # fmt: skip


def _jupiter(args: argparse.Namespace, name: str) -> Any:
    """Jupiter: ``--devices`` worker processes on loopback (this process is device 0),
    started once and kept for every request."""
    from coinfer.cli.edge import rendezvous, spawn_workers, stage_placement
    from coinfer.engines.jupiter import EdgeCluster
    from coinfer.serve import engines

    if args.devices < 1 or args.cores_per_device < 1:
        raise ConfigError("--devices and --cores-per-device must be >= 1", hint="e.g. --devices 2")
    if args.decode == "sd":
        raise ConfigError("--engine jupiter serves --decode naive, outline or auto", hint="drop --decode sd")
    master, token = rendezvous(argparse.Namespace(listen=None, devices=args.devices))
    procs = spawn_workers(args, master, token) if args.devices > 1 else []

    def release() -> None:
        cluster.close()
        for p in procs:
            p.kill()
            p.wait()

    kv, device = stage_placement(args)
    try:
        cluster = EdgeCluster(args.model, world=args.devices, master=master, threads=args.cores_per_device,
                              n_ctx=args.ctx, token=token, kv=kv, device=device,
                              dtype=args.dtype)  # fmt: skip
    except BaseException:
        for p in procs:
            p.kill()
        raise
    return engines.jupiter_served(cluster, name=name, decode=args.decode, max_queue=args.max_queue,
                                  on_release=release)  # fmt: skip


def _loaded(args: argparse.Namespace, spec: str | None, batches: Any, **options: Any) -> Any:
    """``load_from_args``, then on a GPU the forward shapes of ``batches`` sequences
    captured before the first request, which would otherwise pay each one (a CUDA graph
    capture costs tens of forwards, a first compile seconds)."""
    return _captured(load_from_args(args, spec, quiet=True, **options), batches)


def _captured(model: Any, batches: Any) -> Any:
    """``model``, with the forward shapes of ``batches`` sequences captured where it runs
    on static caches with CUDA graphs (plain batched decoding as much as the engines: on an
    H200 a plain server that captured nothing served 4 clients at 50 tokens/s, paying
    its captures and compiles inside the requests, ``docs/bench/decode-cuda``)."""
    capture = getattr(model, "capture_shapes", None)  # models on static caches; none without graphs
    started = time.perf_counter()
    if capture is not None and (count := capture(batches=batches, spans=_CAPTURED_SPANS)):
        seconds = time.perf_counter() - started
        err(f"{model.name}: {count} forward shapes captured as CUDA graphs in {seconds:.0f} s")
    return model


def _drafter(args: argparse.Namespace, target: Any, spec: str, batches: Any = (1,)) -> Any:
    from coinfer.decoding import TextDrafter, open_drafter

    if spec == "none":
        return None
    drafter = open_drafter(
        spec, target, load=lambda name: _loaded(args, name, batches),
        draft_prompts=lambda model: [], target_prompt_lens=[],
    )  # fmt: skip
    if isinstance(drafter, TextDrafter):
        drafter.close()
        raise ConfigError(
            f"the draft {spec} tokenizes differently from {target.name}: not served yet",
            hint="serve with --draft ngram, heads:DIR or a draft model of the target's vocabulary",
        )
    return drafter


def cmd_serve(args: argparse.Namespace) -> int:
    from coinfer.serve import Server
    from coinfer.serve.process import READY_PREFIX

    key = args.api_key or os.environ.get("COINFER_API_KEY") or None
    if args.host not in LOOPBACK and not key:
        err(f"warning: serving on {args.host} with no API key: anyone who can reach it can use it")
    server = Server(_all_served(args), host=args.host, port=args.port, api_key=key)
    try:
        server.start()
        print(f"{READY_PREFIX}{', '.join(server.served)} at {server.url}", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with suppress(KeyboardInterrupt):
            stop.wait()
    finally:
        server.stop()
        for served in server.served.values():
            model = getattr(served, "model", None)
            if model is not None and hasattr(model, "close"):
                model.close()
    return 0


def add_parser(sub: Any) -> None:
    from coinfer.serve.engines import ENGINES

    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API")
    add_model_flags(
        p, default=None, required=False, ctx=8192,
        ctx_help="each conversation's window in tokens (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--engine", default="plain", choices=ENGINES, help="how requests are decoded (default: plain)"
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
        "--batch-floor", type=float, default=0.97,
        help="collective: in a batch, drafts are cut so that every request keeps this share of its "
        "plain decoding rate (0: the batch's best throughput; default: %(default)s)",
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
        "--decode", default="naive", choices=["naive", "outline", "auto"],
        help="jupiter: naive continues the chat; outline and auto answer a list question point by point",
    )  # fmt: skip
