"""``coinfer minions``: a question about documents, answered by a local model that reads
them and a remote one that never sees them (paper 000)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from coinfer.cli.common import add_output_flags, add_pair_flags, check_trace_path, err, open_chat_from_args
from coinfer.errors import ConfigError

__all__ = ["add_parser", "cmd_minions"]


def _protocol_config(args: argparse.Namespace) -> Any:
    """The protocol's config from the flags, made (and so checked) before any model loads."""
    from coinfer.engines import minions as m

    def rounds(default: int) -> int:
        return default if args.max_rounds is None else args.max_rounds

    if args.protocol == "minion":
        return m.MinionConfig(max_rounds=rounds(4))
    if args.protocol == "minions":
        return m.MinionsConfig(
            max_rounds=rounds(2),
            tasks_per_round=args.tasks_per_round,
            samples_per_task=args.samples_per_task,
            chunk_chars=args.chunk_chars,
            round_context=args.round_context,
        )
    if args.protocol == "rag":
        return m.RagConfig(retriever=args.retriever, top_k=args.rag_chunks, chunk_chars=args.rag_chunk_chars)
    return m.DirectConfig(side="remote" if args.protocol == "remote-only" else "local")


@contextmanager
def _models(args: argparse.Namespace) -> Iterator[tuple[Any, Any]]:
    """The local chat model and the remote one (a server this command starts, unless
    --remote-base-url names one), each only if the protocol uses it."""
    from coinfer.chat import OpenAIChat
    from coinfer.serve.process import ServerProcess

    local = remote = server = None
    try:
        if args.protocol not in ("remote-only", "rag"):
            if not args.json:
                err(f"loading the local model {args.local}…")
            local = open_chat_from_args(
                args, args.local, n_ctx=args.local_ctx, parallel=args.parallel, quiet=args.json
            )
        if args.protocol != "local-only":
            url = args.remote_base_url
            if url is None:
                if not args.json:
                    err(f"starting a loopback server for the remote model {args.remote}…")
                server = ServerProcess(args.remote, ctx=args.remote_ctx, max_batch=1).start()
                url = server.url
            remote = OpenAIChat(args.remote, base_url=url, api_key=args.remote_api_key)
        yield local, remote
    finally:
        if local is not None:
            local.close()
            local.model.close()
        if server is not None:
            server.stop()


def cmd_minions(args: argparse.Namespace) -> int:
    from coinfer.chat import PriceTable
    from coinfer.decoding.trace import TraceRecorder, recorded, save_trace
    from coinfer.engines import minions as m
    from coinfer.engines.minions.documents import check_local_window, load_documents
    from coinfer.engines.minions.report import cost_table, round_costs, summary, trace_line

    config = _protocol_config(args)
    check_trace_path(args.trace)
    documents = load_documents(args.doc)
    if not args.question.strip():
        raise ConfigError("the question is empty", hint="pass --question 'what you want to know'")
    table = PriceTable.from_file(args.prices) if args.prices else PriceTable()
    priced_as = args.price_as or (args.remote if table.price_of(args.remote) else "gpt-4o")
    price = table.price_of(priced_as)
    recorder = TraceRecorder(args.protocol, model=args.remote, draft=args.local, prompt=args.question)
    with _models(args) as (local, remote):
        if local is not None:
            check_local_window(local.model, args.question, documents, args.protocol)
        steps = m.stream(args.question, documents, local=local, remote=remote, config=config)
        for answer in recorded(steps, recorder):
            if "event" in answer.extras and not args.json:
                err("\n".join(trace_line(answer.extras["event"])))
    report = summary(answer, price=price, priced_as=priced_as)
    if args.trace:
        cost = {"remote_usd": report["cost_usd"], "priced_as": report["priced_as"],
                "remote_by_round": round_costs(answer, price)}  # fmt: skip
        save_trace(recorder.finish(cost=cost), args.trace)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 0
    print(answer.text)
    if answer.extras["best_effort"]:
        err("note: a best-effort answer: " + "; ".join(answer.extras["problems"]))
    err("\n" + cost_table(answer, price=price, priced_as=priced_as))
    return 0


def add_parser(sub: Any) -> None:
    p = sub.add_parser("minions", help="answer a question about documents with a local and a remote model")
    p.add_argument("--doc", action="append", required=True, help="a text document (repeat for several)")
    p.add_argument("--question", "-q", required=True)
    p.add_argument(
        "--protocol", default="minions", choices=["minion", "minions", "remote-only", "local-only", "rag"]
    )
    add_pair_flags(p, price_as=None)
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
    p.add_argument("--rag-chunks", type=int, default=8, help="chunks sent to the remote by rag")
    p.add_argument("--rag-chunk-chars", type=int, default=1000)
    p.add_argument("--local-ctx", type=int, default=16384, help="each local conversation's window")
    p.add_argument("--remote-ctx", type=int, default=32768, help="the loopback remote's window")
    p.add_argument("--backend", "-b", default="llama.cpp", choices=["llama.cpp", "transformers"])
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--device", default=None)
    add_output_flags(p, trace=True)
    p.set_defaults(func=cmd_minions)
