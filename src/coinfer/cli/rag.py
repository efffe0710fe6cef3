"""``coinfer rag``: retrieval-augmented answers from two private corpora (paper 003).

``coinfer rag cloud`` serves a model and a corpus to devices; ``coinfer rag ask`` answers
a question from the device's own corpus, and with ``--cloud HOST:PORT`` from the cloud's
too, by Speculative Aggregation: documents never leave their side. Both ends read the
shared secret from ``$COINFER_LINK_TOKEN``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from contextlib import suppress
from pathlib import Path
from typing import Any

from coinfer.cli.common import (
    add_model_flags,
    add_output_flags,
    add_sampling_flags,
    check_trace_path,
    err,
    load_from_args,
    sampling_from_args,
)
from coinfer.errors import ConfigError

__all__ = [
    "READY_PREFIX",
    "RAG_DEFAULTS",
    "add_parser",
    "cloud_link",
    "cloud_of",
    "cmd_ask",
    "cmd_cloud",
    "corpus_from_args",
    "dragon_knobs",
]

READY_PREFIX = "coinfer rag cloud: listening on "
TOKEN_ENV = "COINFER_LINK_TOKEN"


def _token() -> str:
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        raise ConfigError(
            f"${TOKEN_ENV} is not set",
            hint=f"export {TOKEN_ENV}=<a shared secret> on the device and the cloud",
        )
    return token


def _tls(args: argparse.Namespace) -> Any:
    from coinfer.transport.link import Tls

    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror}", hint="pass a PEM file") from exc

    cert, key, root = read(args.tls_cert), read(args.tls_key), read(args.tls_root)
    if cert is None and key is None and root is None:
        return None
    return Tls(certificate=cert, key=key, root=root)


# the flags' defaults, for commands that take a corpus and a cloud without every rag flag
RAG_DEFAULTS: dict[str, Any] = {
    "top_k_docs": 2, "chunk_chars": 400, "retrieval": "fused", "relevance_temperature": 0.1,
    "rescore_every": 16, "tls_cert": None, "tls_key": None, "tls_root": None, "aggregator": "both",
    "lookahead": 8, "cloud_timeout": 10.0,
}  # fmt: skip


def dragon_knobs(args: argparse.Namespace) -> dict[str, Any]:
    """``DragonConfig``'s fields from the flags, but the request's budget and sampling."""
    return {
        "top_k": args.top_k_docs,
        "chunk_chars": args.chunk_chars,
        "retrieval": args.retrieval,
        "relevance_temperature": args.relevance_temperature,
        "rescore_every": args.rescore_every,
        "aggregator": args.aggregator,
        "lookahead": args.lookahead,
    }


def _config(args: argparse.Namespace) -> Any:
    from coinfer.engines.dragon import DragonConfig

    return DragonConfig(max_tokens=args.max_tokens, sampling=sampling_from_args(args), **dragon_knobs(args))


def corpus_from_args(args: argparse.Namespace) -> Any:
    from coinfer.engines.dragon import Corpus, read_corpus

    return Corpus(read_corpus(args.corpus), chunk_chars=args.chunk_chars)


def cmd_cloud(args: argparse.Namespace) -> int:
    from coinfer.engines.dragon import CloudService
    from coinfer.transport.link import LinkServer

    token = _token()
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"--listen wants HOST:PORT, got {args.listen!r}", hint="e.g. --listen 127.0.0.1:50071"
        )
    corpus = corpus_from_args(args)
    model = load_from_args(args, quiet=True)
    server = LinkServer(
        CloudService(model, corpus, max_answers=args.max_batch).serve,
        token=token, host=host, port=int(port), tls=_tls(args), max_streams=max(8, 2 * args.max_batch),
    )  # fmt: skip
    try:
        server.start()
        print(f"{READY_PREFIX}{host}:{server.port} ({len(corpus.chunks)} chunks)", flush=True)
        stop = threading.Event()
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with suppress(KeyboardInterrupt):
            stop.wait()
    finally:
        server.stop(grace=1.0)
        model.close()
    return 0


def cloud_of(args: argparse.Namespace) -> Any:
    """The cloud link of ``--cloud`` (None without a cloud)."""
    if not args.cloud:
        return None
    from coinfer.engines.dragon import CloudLink

    return CloudLink(address=args.cloud, token=_token(), tls=_tls(args), idle_s=args.cloud_timeout)


def cloud_link(args: argparse.Namespace) -> tuple[Any, Any]:
    """The cloud link of ``--cloud`` and its channel, connecting at once (while the model
    loads); (None, None) without a cloud."""
    link = cloud_of(args)
    if link is None:
        return None, None
    from coinfer.engines.dragon import open_channel

    return link, open_channel(link)


def cmd_ask(args: argparse.Namespace) -> int:
    from coinfer.decoding.trace import TraceRecorder, recorded, save_trace
    from coinfer.engines.dragon import stream

    question = " ".join(args.question).strip()
    if not question:
        raise ConfigError(
            "the question is empty", hint='coinfer rag ask --corpus DIR "what you want to know"'
        )
    config = _config(args)
    check_trace_path(args.trace)
    link, channel = cloud_link(args)
    corpus = corpus_from_args(args)
    model = load_from_args(args, quiet=args.json)
    recorder = TraceRecorder("dragon", model=model.name, prompt=question, detokenize=model.detokenize)

    def documents() -> list[Any]:  # retrieved once the cloud has the question
        return corpus.retrieve(
            question, config.top_k, how=config.retrieval, temperature=config.relevance_temperature
        )

    try:
        text, last = [], None
        rescore = corpus.rescorer(question, temperature=config.relevance_temperature)
        replies = stream(
            model, question, documents=documents, config=config, cloud=link, channel=channel, rescore=rescore
        )
        for last in recorded(replies, recorder):
            text.append(last.text)
            if not args.json:
                sys.stdout.write(last.text)
                sys.stdout.flush()
    finally:
        model.close()
        if channel is not None:
            channel.close()
    assert last is not None  # a stream yields at least its last response
    if args.trace:
        save_trace(recorder.finish(), args.trace)
    extras, stats = last.extras, last.stats
    if args.json:
        report = {
            "text": "".join(text),
            "finish_reason": last.finish_reason,
            "tokens": stats.n_tokens,
            "ttft_s": round(stats.ttft_s, 4),
            "tokens_per_s": round(stats.tokens_per_s, 3),
            "decode_tokens_per_s": round(stats.decode_tokens_per_s, 3),
            **extras,
        }
        print(json.dumps(report, ensure_ascii=False))
        return 0
    print()
    if "fallback" in extras:
        err(f"note: {extras['fallback']}")
    err(_summary(extras, stats))
    return 0


def _summary(extras: dict[str, Any], stats: Any) -> str:
    line = f"{extras['mode']}: {len(extras['documents'])} device documents"
    if "cloud_documents" in extras:
        line += f", {extras['cloud_documents']} cloud documents"
    if "accepted" in extras:
        a, r = extras["accepted"], extras["rejected"]
        shares = [f"{side} {a[side]}/{a[side] + r[side]}" for side in ("device", "cloud")]
        line += "; drafts accepted " + ", ".join(shares)
    return (
        line + f"; {stats.n_tokens} tokens, TTFT {stats.ttft_s:.2f} s, {stats.decode_tokens_per_s:.1f} tok/s"
    )


def _add_rag_flags(p: argparse.ArgumentParser) -> None:
    add_model_flags(p)
    p.add_argument(
        "--corpus", required=True, help="a folder of .txt, .md, .rst or .py files (this side's, private)"
    )
    p.add_argument(
        "--docs",
        dest="top_k_docs",
        type=int,
        default=RAG_DEFAULTS["top_k_docs"],
        help="documents retrieved per side (default: 2)",
    )
    p.add_argument(
        "--chunk-chars",
        type=int,
        default=RAG_DEFAULTS["chunk_chars"],
        help="characters per document chunk (default: 400)",
    )
    p.add_argument(
        "--retrieval",
        default=RAG_DEFAULTS["retrieval"],
        choices=["fused", "bm25", "dense"],
        help="how chunks are ranked",
    )
    p.add_argument(
        "--relevance-temperature",
        type=float,
        default=RAG_DEFAULTS["relevance_temperature"],
        help="mixture weights: softmax(similarity / this)",
    )
    p.add_argument("--tls-cert", default=None, help="PEM certificate chain (the cloud; enables TLS)")
    p.add_argument("--tls-key", default=None, help="PEM private key (the cloud)")
    p.add_argument("--tls-root", default=None, help="PEM root certificate the device trusts")


def add_parser(sub: Any) -> None:
    rag = sub.add_parser("rag", help="answer from the device's and the cloud's private documents (DRAGON)")
    commands = rag.add_subparsers(dest="rag_command", required=True)

    ask = commands.add_parser("ask", help="answer a question (with --cloud: from both sides' documents)")
    _add_rag_flags(ask)
    ask.add_argument("question", nargs="+")
    ask.add_argument(
        "--cloud", default=None, help="HOST:PORT of `coinfer rag cloud` (default: the device alone)"
    )
    ask.add_argument(
        "--aggregator",
        default=RAG_DEFAULTS["aggregator"],
        choices=["both", "auto", "device", "cloud"],
        help="the side that aggregates (both: each side on its own copy; auto: the live scheduler moves it;"
        " default both)",
    )
    ask.add_argument(
        "--lookahead",
        type=int,
        default=RAG_DEFAULTS["lookahead"],
        help="tokens a side drafts ahead (0: token-wise sync)",
    )
    ask.add_argument(
        "--cloud-timeout",
        type=float,
        default=RAG_DEFAULTS["cloud_timeout"],
        help="seconds without progress before finishing alone",
    )
    ask.add_argument(
        "--rescore-every",
        type=int,
        default=RAG_DEFAULTS["rescore_every"],
        help="dynamic weights: re-score the documents every N tokens on both sides (0: never; default 16)",
    )
    ask.add_argument("--max-tokens", type=int, default=256)
    add_sampling_flags(ask)
    add_output_flags(ask, trace=True)
    ask.set_defaults(func=cmd_ask)

    cloud = commands.add_parser("cloud", help="serve a model and a corpus to devices")
    _add_rag_flags(cloud)
    cloud.add_argument(
        "--listen", default="127.0.0.1:50071", help="HOST:PORT (default: loopback, %(default)s)"
    )
    cloud.add_argument(
        "--max-batch", type=int, default=1,
        help="answers decoded at once, their forwards in one batch, each with its share of --ctx's "
        "cells (default: %(default)s; more wait their turn)",
    )  # fmt: skip
    cloud.set_defaults(func=cmd_cloud)
