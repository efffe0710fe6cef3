"""``coinfer bench serve``: the server under a storm of streaming clients (``bench.serve_load``),
its speed against llama.cpp's own server as a client sees it (``bench.serve_speed``),
both under 1 to 32 concurrent clients (``bench.serve_concurrency``), every engine at 1
and 4 clients (``bench.serve_engines``), and multi-turn chats with think time
(``bench.serve_chat``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from coinfer.cli.common import err

__all__ = ["add_serve_bench", "cmd_bench_serve"]


def cmd_bench_serve(args: argparse.Namespace) -> int:
    passed = _load(args) if args.part in ("load", "all") else True
    if args.part in ("speed", "all"):
        _speed(args)
    if args.part in ("concurrency", "all"):
        _concurrency(args)
    if args.part in ("engines", "all"):
        _engines(args)
    if args.part in ("chat", "all"):
        _chat(args)
    return 0 if passed else 1


def _chat(args: argparse.Namespace) -> None:
    from coinfer.bench.serve_chat import ChatConfig, markdown_table, run_chat

    config = ChatConfig(
        model=args.concurrency_model, clients=4 if args.quick else args.chat_clients, turns=args.turns,
        think_s=args.think, max_tokens=args.chat_tokens, slots=args.max_batch, repeats=args.repeats,
        systems=tuple(args.chat_systems.split(",")) if args.chat_systems else ChatConfig().systems,
    )  # fmt: skip
    report = run_chat(config, log=err)
    _publish(args, "chat", report, markdown_table(report), shown="systems")


def _engines(args: argparse.Namespace) -> None:
    from coinfer.bench.serve_engines import EnginesConfig, markdown_table, run_engines

    config = EnginesConfig(
        model=args.concurrency_model, levels=_numbers(args.engine_levels), max_tokens=args.concurrency_tokens,
        engines=tuple(args.engines.split(",")) if args.engines else EnginesConfig().engines,
        requests=3 if args.quick else 8, questions=1 if args.quick else 4,
    )  # fmt: skip
    report = run_engines(config, log=err)
    _publish(args, "engines", report, markdown_table(report), shown="engines")


def _publish(
    args: argparse.Namespace, stem: str, report: dict[str, Any], table: str, *, shown: str,
    plot: Callable[[dict[str, Any], Path], bool] | None = None,
) -> None:  # fmt: skip
    """A part's report under ``--out`` as STEM.json, STEM.md (and STEM.png where it plots);
    ``report[shown]`` on stdout with ``--json``, else the table and the files on stderr."""
    from coinfer.bench.report import write_json, write_markdown

    out = Path(args.out)
    write_json(out / f"{stem}.json", report)
    write_markdown(out / f"{stem}.md", table)
    files = [f"{stem}.json", f"{stem}.md"]
    if plot is not None and plot(report, out / f"{stem}.png"):
        files.append(f"{stem}.png")
    if args.json:
        print(json.dumps(report[shown]))
        return
    err(table)
    err(f"wrote {out}/{', '.join(files)}")


def _concurrency(args: argparse.Namespace) -> None:
    from coinfer.bench.serve_concurrency import ConcurrencyConfig, markdown_table, plot, run_concurrency

    config = ConcurrencyConfig(
        model=args.concurrency_model, levels=_numbers(args.levels), max_tokens=args.concurrency_tokens,
        slots=args.max_batch, per_category=1 if args.quick else args.per_category,
        systems=tuple(args.systems.split(",")) if args.systems else ConcurrencyConfig().systems,
        shared_tokens=args.shared_tokens, repeats=args.repeats, temperature=args.concurrency_temperature,
        prompts=args.concurrency_prompts,
    )  # fmt: skip
    report = run_concurrency(config, log=err)
    _publish(args, "concurrency", report, markdown_table(report), shown="systems", plot=plot)


def _numbers(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        from coinfer.errors import ConfigError

        raise ConfigError(
            f"--levels {text!r} is not a list of client counts", hint="e.g. --levels 1,4,16,32"
        ) from None


def _speed(args: argparse.Namespace) -> None:
    from coinfer.bench.report import write_json
    from coinfer.bench.serve_speed import SpeedConfig, run_speed

    config = SpeedConfig(
        model=args.speed_model, max_tokens=args.speed_tokens, per_category=1 if args.quick else 4
    )
    report = run_speed(config, log=err)
    write_json(Path(args.out) / "speed.json", report)
    if args.json:
        print(json.dumps(report["summary"]))
        return
    for name, s in report["summary"].items():
        err(
            f"{name}: {s['geomean_vs_plain']}x coinfer plain serving (min {s['min_vs_plain']}x), "
            f"{s['identical_to_plain']}/{s['prompts']} texts identical"
        )
    if not any(k.startswith("llama-server") for k in report["systems"]):
        err("note: llama-server is not built here: coinfer bench speculative --build-peers builds it")


def _load(args: argparse.Namespace) -> bool:
    from coinfer.bench.report import write_json
    from coinfer.bench.serve_load import LoadConfig, run_load

    clients = 8 if args.quick else args.clients
    requests = clients if args.quick else args.requests
    config = LoadConfig(
        model=args.model, engine=args.engine, clients=clients, requests=requests, max_tokens=args.max_tokens,
        max_batch=args.max_batch, disconnect=args.disconnect,
    )  # fmt: skip
    err(f"{requests} requests from {clients} streaming clients against coinfer serve {args.model}…")
    result = run_load(config).as_dict()
    write_json(Path(args.out) / "load.json", result)
    if args.json:
        print(json.dumps(result))
    else:
        err(
            f"{result['complete']}/{result['streams']} streams complete, {len(result['errors'])} errors, "
            f"{result['rate_limited']} honest 429s, {result['resent']} closed unanswered, "
            f"{result['left']} left mid-stream, "
            f"{result['identical']} identical to the request alone; live sequences "
            f"{result['live_start']:.0f} -> {result['live_end']:.0f}; "
            f"{result['tokens']} tokens in {result['wall_s']} s; memory {result['rss_start_mb']} -> "
            f"{result['rss_end_mb']} MB; {'passed' if result['passed'] else 'FAILED'}; "
            f"wrote {args.out}/load.json"
        )
    return bool(result["passed"])


def add_serve_bench(bench: Any) -> None:
    p = bench.add_parser("serve", help="coinfer serve under concurrent streaming clients (the load test)")
    p.add_argument("--out", default="bench-results/serve")
    p.add_argument("--model", "-m", default="smollm2-135m")
    p.add_argument("--engine", default="plain", choices=["plain", "speculative"])
    p.add_argument(
        "--clients", type=int, default=32, help="concurrent streaming clients (default: %(default)s)"
    )
    p.add_argument("--requests", type=int, default=32, help="requests in all (default: %(default)s)")
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument("--max-batch", type=int, default=8, help="the server's batch (default: %(default)s)")
    p.add_argument(
        "--disconnect", type=float, default=0.0,
        help="load: the share of clients that go away mid-stream (churn; default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--part",
        default="all",
        choices=["load", "speed", "concurrency", "engines", "chat", "all"],
        help="what to run (default: all)",
    )
    _add_concurrency_flags(p)
    p.add_argument(
        "--engines", default=None,
        help="the engines part's engines, comma-separated (default: plain, speculative, collective, "
        "llmcad, dragon, minions)",
    )  # fmt: skip
    p.add_argument("--engine-levels", default="1,4", help="the engines part's client counts (default: 1,4)")
    _add_chat_flags(p)
    p.add_argument("--speed-model", default="qwen2.5-coder-1.5b", help="the speed part's model")
    p.add_argument("--speed-tokens", type=int, default=192, help="the speed part's tokens per answer")
    p.add_argument(
        "--quick",
        action="store_true",
        help="load: 8 clients and 8 requests; speed, concurrency: one prompt per category; chat: 4 clients",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bench_serve)


def _add_concurrency_flags(p: argparse.ArgumentParser) -> None:
    """The concurrency part's: model, tokens, levels, sampling, prompts, servers and repeats."""
    p.add_argument("--concurrency-model", default="qwen2.5-coder-1.5b", help="the concurrency part's model")
    p.add_argument(
        "--concurrency-tokens", type=int, default=128, help="the concurrency part's tokens per answer"
    )
    p.add_argument("--levels", default="1,4,16,32", help="the concurrency part's client counts")
    p.add_argument(
        "--concurrency-temperature", type=float, default=0.0,
        help="the concurrency part's sampling: 0 greedy (default), else each request sampled at this "
        "temperature with its prompt's index as seed",
    )  # fmt: skip
    p.add_argument(
        "--shared-tokens", type=int, default=0,
        help="the concurrency part: a system message of about N tokens that every request opens with",
    )  # fmt: skip
    p.add_argument(
        "--per-category", type=int, default=4,
        help="the concurrency part's prompts of each kind (code, edit, grounded; every fourth held out)",
    )  # fmt: skip
    p.add_argument(
        "--concurrency-prompts", default=None, metavar="FILE",
        help='the concurrency part: your own prompts in place of the suite, JSON lines {"id", "category", '
        '"messages"} (every fourth held out)',
    )  # fmt: skip
    p.add_argument(
        "--systems", default=None,
        help="the concurrency part's servers, comma-separated (default: coinfer-plain, coinfer-speculative, "
        "llama-server-plain, llama-server-ngram-mod)",
    )  # fmt: skip
    p.add_argument(
        "--repeats", type=int, default=1,
        help="the concurrency part: runs of each level, the systems' runs interleaved (a CPU bench moves "
        "10-20%% from one run to the next; default: %(default)s)",
    )  # fmt: skip


def _add_chat_flags(p: argparse.ArgumentParser) -> None:
    """The chat part's: conversations, turns, think time, tokens and servers."""
    p.add_argument("--chat-clients", type=int, default=12, help="the chat part's conversations at once")
    p.add_argument("--turns", type=int, default=3, help="the chat part's turns per conversation")
    p.add_argument(
        "--think",
        type=float,
        default=5.0,
        help="the chat part's seconds between a reply and the next question",
    )
    p.add_argument("--chat-tokens", type=int, default=96, help="the chat part's tokens per answer")
    p.add_argument(
        "--chat-systems", default=None,
        help="the chat part's servers, comma-separated (default: coinfer-speculative, "
        "coinfer-speculative-nostore, llama-server-ngram-mod)",
    )  # fmt: skip
