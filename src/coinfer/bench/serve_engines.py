"""Does every served engine answer several clients at once? ``coinfer bench serve --part
engines``: each engine behind its own ``coinfer serve``, started fresh, sent the same
requests by 1 and then by 4 concurrent streaming clients of the official ``openai``
client; its aggregate throughput at each level, and their ratio.

Engines that continue a prompt take the speculative suite's code prompts and are
measured in completion tokens per second. MinionS answers questions about the documents
each request brings (the MinionS bench's CPython modules, the shortest first) and is
measured in questions per minute: its completion tokens are the remote's answer. DRAGON
answers the DRAGON bench's questions from one corpus of every question's device files
(device-only: no cloud process shares the cores), in completion tokens per second.
MinionS's remote is a second ``coinfer serve`` on loopback, and the two sides run on a core
each (one thread each; as DRAGON's bench pins device and cloud): the remote stands for a
machine of its own, as a cloud is (two llama.cpp processes of two threads each on the same
two cores contend for them: 0.78x at 4 questions against 1, before they were pinned).
Jupiter serves the smaller model as a pipeline of two device processes, one core each. An
engine that serves one request at a time shows about 1x; one that batches or overlaps its
requests, more. Nothing here is tuned, so there is no held-out half.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coinfer.bench.serve_load import Stream, Work, clients_at_once
from coinfer.errors import ConfigError

__all__ = ["ENGINES", "EnginesConfig", "engine_servers", "level_row", "markdown_table", "run_engines"]

# engine -> its flags beyond --engine and the model (what it needs is the registry's word)
ENGINES: dict[str, list[str]] = {
    "plain": [],
    "speculative": ["--draft", "ngram"],
    "collective": ["--drafts", "ngram,qwen2.5-coder-0.5b"],
    "llmcad": ["--draft", "qwen2.5-coder-0.5b"],
    "dragon": [],  # and --corpus, written when it runs
    "minions": ["--remote", "qwen2.5-coder-1.5b", "--remote-ctx", "8192"],
    "jupiter": ["--devices", "2"],  # two device processes of one core each, on transformers weights
}


@dataclass(frozen=True, kw_only=True)
class EnginesConfig:
    """``model``: the target (MinionS: its local model is ``local``; Jupiter's pipeline
    serves ``local`` too, a transformers model split over its devices); ``requests``: per
    level (MinionS: ``questions``)."""

    model: str = "qwen2.5-coder-1.5b"
    local: str = "qwen2.5-coder-0.5b"
    engines: tuple[str, ...] = tuple(ENGINES)
    levels: tuple[int, ...] = (1, 4)
    requests: int = 8
    questions: int = 4
    max_tokens: int = 96
    max_batch: int = 4
    ctx: int = 8192
    deadline_s: float = 3600.0

    def __post_init__(self) -> None:
        unknown = set(self.engines) - set(ENGINES)
        if unknown:
            raise ConfigError(f"unknown engines {sorted(unknown)}", hint=f"choose among {', '.join(ENGINES)}")
        if min(self.levels, default=0) < 1 or min(self.requests, self.questions, self.max_batch) < 1:
            raise ConfigError("levels, requests, questions and max_batch must be >= 1")


def _dragon_corpus(folder: Path) -> tuple[list[str], Work]:
    """The flags and the requests of DRAGON on the device: every question's device files
    in one folder, and the questions."""
    from coinfer.bench.dragon import load_questions

    rows = load_questions(None, None)
    for q in rows:
        for name, text in q["device"].items():
            (folder / f"{q['id']}-{name}").write_text(text)
    return ["--corpus", str(folder)], [([{"role": "user", "content": q["question"]}], None) for q in rows]


def _work(documents: bool, config: EnginesConfig) -> Work:
    """The requests an engine is sent: code prompts, or questions with their document."""
    if documents:
        from coinfer.bench.minions import load_questions

        rows = sorted(load_questions(), key=lambda q: (len(q["text"]), q["id"]))[: config.questions]
        brought = [{"documents": [{"name": q["doc"], "text": q["text"]}]} for q in rows]
        return [([{"role": "user", "content": q["question"]}], b) for q, b in zip(rows, brought, strict=True)]
    from coinfer.bench.workloads import build_suite

    prompts = build_suite(per_category=max(1, -(-config.requests // 3)))
    return [(p["messages"], None) for p in prompts[: config.requests]]


def level_row(clients: int, streams: list[Stream], wall_s: float) -> dict[str, Any]:
    """One level's figures: requests answered, errors, throughput, the mean time from a
    request sent to its last token, and where the engine says a request's time went."""
    done = [s for s in streams if s.error is None]
    tokens = sum(s.tokens for s in done)
    said = [s.seconds for s in done if s.seconds]
    seconds = {k: round(sum(d.get(k, 0.0) for d in said) / len(said), 2) for k in said[0]} if said else None
    return {
        "clients": clients,
        "requests": len(streams),
        "answered": len(done),
        "errors": [f"request {s.prompt}: {s.error}" for s in streams if s.error is not None],
        "wall_s": round(wall_s, 2),
        "tok_s": round(tokens / wall_s, 3) if wall_s > 0 else 0.0,
        "per_min": round(60 * len(done) / wall_s, 3) if wall_s > 0 else 0.0,
        "latency_s": round(sum(s.last_s or 0.0 for s in done) / len(done), 2) if done else None,
        "seconds_per_request": seconds,  # where the engine says a request's time went, on average
    }


def _engine(name: str, config: EnginesConfig, log: Callable[[str], None]) -> dict[str, Any]:
    from coinfer.decoding.registry import get

    engine = get(name)
    documents = engine.needs_documents  # MinionS: questions on the documents each brings
    flags = ["--engine", name, *ENGINES[name]]
    model = config.local if documents or "cluster" in engine.parts else config.model
    rows = []
    with tempfile.TemporaryDirectory(prefix="coinfer-engines-") as tmp:
        if "corpus" in engine.parts:  # DRAGON: questions on this device's own corpus
            corpus, work = _dragon_corpus(Path(tmp))
            flags += corpus
        else:
            work = _work(documents, config)
        for clients in config.levels:  # fresh servers per level: no level reads another's caches
            with contextlib.ExitStack() as stack:
                url = engine_servers(stack, model, flags, config)
                run = clients_at_once(url, model, work, list(range(len(work))), clients,
                                      max_tokens=config.max_tokens, deadline_s=config.deadline_s)  # fmt: skip
                rows.append(level_row(clients, *asyncio.run(run)))
            _log_row(name, rows[-1], log)
    unit = "per_min" if documents else "tok_s"
    first = rows[0][unit]
    scaling = {r["clients"]: round(r[unit] / first, 3) if first else None for r in rows}
    return {"engine": name, "model": model, "unit": unit, "flags": flags, "rows": rows, "scaling": scaling}


def engine_servers(stack: contextlib.ExitStack, model: str, flags: list[str], config: EnginesConfig) -> str:
    """The engine's server, started (and stopped with ``stack``); where its ``flags`` name
    a remote model (``--remote``: MinionS) and the machine has two cores, the remote served
    on a core of its own and the engine on the other. (Not the registry's ``parts``: MinionS
    lists its remote among its optional parts, and DRAGON, which also takes a remote, runs
    here on the device alone.)"""
    from coinfer.serve.process import ServerProcess

    cores = sorted(os.sched_getaffinity(0))
    if "--remote" not in flags or len(cores) < 2:
        return stack.enter_context(ServerProcess(model, ctx=config.ctx, max_batch=config.max_batch,
                                                 extra_args=flags)).url  # fmt: skip
    remote_model = flags[flags.index("--remote") + 1]  # the model the engine asks for there
    far = stack.enter_context(ServerProcess(remote_model, ctx=config.ctx, max_batch=config.max_batch,
                                            extra_args=["--threads", "1"], cores=[cores[1]]))  # fmt: skip
    near = [*flags, "--threads", "1", "--remote-base-url", far.url, "--remote-api-key", "loopback"]
    return stack.enter_context(ServerProcess(model, ctx=config.ctx, max_batch=config.max_batch,
                                             extra_args=near, cores=[cores[0]])).url  # fmt: skip


def _log_row(name: str, r: dict[str, Any], log: Callable[[str], None]) -> None:
    log(f"{name:12} {r['clients']:2} clients: {r['tok_s']:7.2f} tok/s, {r['per_min']:6.2f}/min, "
        f"{len(r['errors'])} errors")  # fmt: skip


def run_engines(config: EnginesConfig, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Every engine at every level; its rows and its throughput against one client's."""
    from coinfer.bench.report import environment

    engines = [_engine(name, config, log) for name in config.engines]
    return {"config": asdict(config), "environment": environment(), "engines": engines}


def markdown_table(report: dict[str, Any]) -> str:
    levels = report["config"]["levels"]
    head = "| engine | model | unit | " + " | ".join(f"{n} clients" for n in levels) + " | "
    head += " | ".join(f"{n} / {levels[0]}" for n in levels[1:]) + " | errors |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for e in report["engines"]:
        values = " | ".join(f"{r[e['unit']]:.2f}" for r in e["rows"])
        ratios = " | ".join(_ratio(e["scaling"].get(r["clients"])) for r in e["rows"][1:])
        errors = sum(len(r["errors"]) for r in e["rows"])
        unit = "questions/min" if e["unit"] == "per_min" else "tok/s"
        lines.append(f"| {e['engine']} | {e['model']} | {unit} | {values} | {ratios} | {errors} |")
    return "\n".join(lines + _split_table(report))


def _split_table(report: dict[str, Any]) -> list[str]:
    """Where a request's time went, for the engines that say (MinionS: seconds waiting on
    each side and on the sandbox, per question, averaged)."""
    rows = [(e["engine"], r) for e in report["engines"] for r in e["rows"] if r.get("seconds_per_request")]
    if not rows:
        return []
    parts = list(rows[0][1]["seconds_per_request"])
    lines = [
        "",
        "| engine | clients | s from sent to answered | " + " | ".join(f"{p} s" for p in parts) + " |",
    ]
    lines.append("|" + "---|" * (len(parts) + 3))
    for name, r in rows:
        spent = " | ".join(f"{r['seconds_per_request'].get(p, 0.0):.1f}" for p in parts)
        lines.append(f"| {name} | {r['clients']} | {r['latency_s']:.1f} | {spent} |")
    return lines


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"
