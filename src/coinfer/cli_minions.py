"""``coinfer serve``, ``coinfer minions`` and ``coinfer bench minions``: flags to the
local–remote protocols (paper 000) and the OpenAI-compatible server they talk through."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from coinfer.cli import DEFAULT_MODEL, _err, _load, prepare_with_progress
from coinfer.errors import CoinferError


def cmd_serve(args: argparse.Namespace) -> int:
    import signal
    import threading

    from coinfer.chat import LocalChat
    from coinfer.serve import ChatServer
    from coinfer.serve.process import READY_PREFIX

    model = _load(args, quiet=True)
    chat = LocalChat(model, max_concurrent=args.max_batch, keep=args.keep)
    server = ChatServer(chat, host=args.host, port=args.port)
    server.start()
    print(f"{READY_PREFIX}{args.model} at {server.url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with suppress(KeyboardInterrupt):
        stop.wait()
    server.stop()
    model.close()
    return 0


def _minions_protocol(args: argparse.Namespace, documents: list[tuple[str, str]]) -> Any:
    from coinfer.engines import minions as m

    if args.protocol == "minion":
        return m.minion(args.question, documents, m.MinionConfig(max_rounds=args.max_rounds or 4))
    if args.protocol == "minions":
        config = m.MinionsConfig(
            max_rounds=args.max_rounds or 2,
            tasks_per_round=args.tasks_per_round,
            samples_per_task=args.samples_per_task,
            chunk_chars=args.chunk_chars,
            round_context=args.round_context,
        )
        return m.minions(args.question, documents, config)
    if args.protocol == "rag":
        from coinfer.retrieval import BM25Retriever, DenseRetriever

        retriever = BM25Retriever() if args.retriever == "bm25" else DenseRetriever()
        return m.rag(args.question, documents, retriever, top_k=args.top_k, chunk_chars=args.rag_chunk_chars)
    return m.direct(args.question, documents, "remote" if args.protocol == "remote-only" else "local")


@contextmanager
def _minions_models(args: argparse.Namespace) -> Iterator[tuple[Any, Any]]:
    """The local chat model and the remote one (a server this command starts, unless
    --remote-base-url names one), each only if the protocol uses it."""
    from coinfer.chat import OpenAIChat, open_local_chat
    from coinfer.models import resolve
    from coinfer.serve.process import ServerProcess

    local = remote = server = None
    try:
        if args.protocol not in ("remote-only", "rag"):
            if resolve(args.local).kind == "catalog":
                prepare_with_progress(args.local, quiet=args.json)
            if not args.json:
                _err(f"loading the local model {args.local}…")
            local = open_local_chat(
                args.local,
                n_ctx=args.local_ctx,
                parallel=args.parallel,
                backend=args.backend,
                n_threads=args.threads,
                device=args.device,
            )
        if args.protocol != "local-only":
            url = args.remote_base_url
            if url is None:
                if not args.json:
                    _err(f"starting a loopback server for the remote model {args.remote}…")
                server = ServerProcess(args.remote, extra_args=["--ctx", str(args.remote_ctx)]).start()
                url = server.url
            remote = OpenAIChat(args.remote, base_url=url, api_key=args.remote_api_key)
        yield local, remote
    finally:
        if local is not None:
            local.model.close()
        if server is not None:
            server.stop()


def cmd_minions(args: argparse.Namespace) -> int:
    from coinfer.chat import PriceTable
    from coinfer.engines.minions import drive
    from coinfer.engines.minions.documents import check_local_window, load_documents
    from coinfer.engines.minions.report import cost_table, summary, trace_line

    documents = load_documents(args.doc)
    if not args.question.strip():
        raise CoinferError("the question is empty", hint="pass --question 'what you want to know'")
    table = PriceTable.from_file(args.prices) if args.prices else PriceTable()
    priced_as = args.price_as or (args.remote if table.price_of(args.remote) else "gpt-4o")
    price = table.price_of(priced_as)
    progress = None if args.json else (lambda event: _err("\n".join(trace_line(event))))
    with _minions_models(args) as (local, remote):
        if local is not None:
            check_local_window(local.model, args.question, documents, args.protocol)
        protocol = _minions_protocol(args, documents)
        run = drive(args.protocol, protocol, local=local, remote=remote, on_event=progress)
    report = summary(run, price=price, priced_as=priced_as)
    if args.trace:
        Path(args.trace).write_text(json.dumps({**report, "trace": run.trace}, indent=2, ensure_ascii=False))
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0
    print(run.finished.answer)
    if run.finished.best_effort:
        _err("note: a best-effort answer: " + "; ".join(run.finished.problems))
    _err("\n" + cost_table(run, price=price, priced_as=priced_as))
    return 0


def cmd_bench_minions(args: argparse.Namespace) -> int:
    from coinfer.bench.minions import PROTOCOLS, MinionsBenchConfig, run_minions_bench

    config = MinionsBenchConfig(
        out=args.out,
        limit=args.limit,
        protocols=tuple(args.protocols or PROTOCOLS),
        local=args.local,
        remote=args.remote,
        remote_base_url=args.remote_base_url,
        price_as=args.price_as,
        parallel=args.parallel,
        questions=tuple(args.questions or ()),
        chunk_chars=args.chunk_chars,
        concurrency=not args.no_concurrency,
    )
    report = run_minions_bench(config, log=_err)
    for name, s in report["summary"].items():
        _err(
            f"{name}: accuracy {s['accuracy']:.0%}, {s['remote_prompt_tokens']:,.0f} remote prefill tokens, "
            f"${s['cost_usd']:.5f} per question"
        )
    if "concurrency" in report:
        _err(f"local jobs together vs one at a time: {report['concurrency']['speedup']}x")
    _err(f"wrote {args.out}/results.json")
    return 0


def add_parsers(sub: Any, bench: Any) -> None:
    """The subcommands ``serve`` and ``minions`` and the benchmark ``bench minions``."""
    p = sub.add_parser("serve", help="serve a model over an OpenAI-compatible HTTP API")
    p.add_argument("model", help="catalogue name, .gguf file or model directory")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (default: %(default)s)")
    p.add_argument("--max-batch", type=int, default=8, help="requests decoded together")
    p.add_argument(
        "--keep",
        type=int,
        default=2,
        help="finished conversations whose caches are kept, so a request that repeats one's "
        "prefix (the same document, a growing chat) is not read again (default: %(default)s)",
    )
    p.add_argument("--backend", "-b", default="llama.cpp", choices=["llama.cpp", "transformers"])
    p.add_argument("--ctx", type=int, default=32768, help="context window shared by all requests")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default=None)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("minions", help="answer a question about documents with a local and a remote model")
    p.add_argument("--doc", action="append", required=True, help="a text document (repeat for several)")
    p.add_argument("--question", "-q", required=True)
    p.add_argument(
        "--protocol", default="minions", choices=["minion", "minions", "remote-only", "local-only", "rag"]
    )
    _add_pair_flags(p, price_as=None)
    p.add_argument("--remote-api-key", default=None, help="default: $OPENAI_API_KEY")
    p.add_argument(
        "--prices", default=None, help='JSON file {"model": [input, output]} in $ per million tokens'
    )
    p.add_argument("--max-rounds", type=int, default=None, help="default: 4 for minion, 2 for minions")
    p.add_argument("--tasks-per-round", type=int, default=3)
    p.add_argument("--samples-per-task", type=int, default=1)
    p.add_argument("--chunk-chars", type=int, default=3000)
    p.add_argument("--round-context", default="scratchpad", choices=["scratchpad", "retry"])
    p.add_argument("--retriever", default="bm25", choices=["bm25", "dense"], help="for --protocol rag")
    p.add_argument("--top-k", type=int, default=8, help="chunks sent to the remote by rag")
    p.add_argument("--rag-chunk-chars", type=int, default=1000)
    p.add_argument("--local-ctx", type=int, default=16384, help="each local conversation's window")
    p.add_argument("--remote-ctx", type=int, default=32768)
    p.add_argument("--backend", "-b", default="llama.cpp", choices=["llama.cpp", "transformers"])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default=None)
    p.add_argument("--trace", default=None, help="write the full trace (every message) to this JSON file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_minions)
    p = bench.add_parser("minions", help="local-remote protocols: accuracy against remote tokens and dollars")
    p.add_argument("--out", default="bench-results/minions")
    p.add_argument("--limit", type=int, default=None, help="questions to run (default: all 36)")
    p.add_argument("--protocols", nargs="*", default=None, help="default: all")
    p.add_argument("--questions", nargs="*", default=None, help="question ids to run, e.g. textwrap/0")
    p.add_argument("--chunk-chars", type=int, default=3000, help="MinionS chunk size (default: %(default)s)")
    p.add_argument("--no-concurrency", action="store_true", help="skip measuring concurrent local jobs")
    _add_pair_flags(p, price_as="gpt-4o")
    p.set_defaults(func=cmd_bench_minions)


def _add_pair_flags(p: argparse.ArgumentParser, *, price_as: str | None) -> None:
    """The local and remote models, how remote tokens are priced, and local parallelism."""
    p.add_argument("--local", default="qwen2.5-coder-0.5b", help="local model (default: %(default)s)")
    p.add_argument(
        "--remote",
        default=DEFAULT_MODEL,
        help="remote model: served here on loopback, or its name at --remote-base-url (default: %(default)s)",
    )
    p.add_argument(
        "--remote-base-url", default=None, help="an OpenAI-compatible API, e.g. https://api.openai.com/v1"
    )
    p.add_argument(
        "--price-as",
        default=price_as,
        help="price remote tokens as this model (default: %(default)s; none: the remote, else gpt-4o)",
    )
    p.add_argument("--parallel", type=int, default=8, help="local jobs decoded together")
