"""``coinfer bench minions``: accuracy against remote tokens and dollars, per protocol.

The workload is committed (``data/minions``): ten CPython standard-library modules as
long documents and 36 questions whose answers are checked by pattern. Every protocol runs
on every question with the same local model (in process, jobs decoded concurrently) and
the same remote model (by default ``qwen2.5-coder-1.5b`` behind a real OpenAI-compatible
server on loopback, started here), and remote tokens are priced as a well-known cloud
model (``price_as``). It also measures what the local side gains from running jobs
concurrently: jobs/s for a batch of ``parallel`` jobs decoded together against the same
jobs one at a time. Results are rewritten after every question; every run's full trace
(each message and reply) goes to ``traces/``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coinfer.bench.report import environment, write_json, write_markdown
from coinfer.chat import ChatModel, LocalChat, OpenAIChat, PriceTable, open_local_chat
from coinfer.decoding import Response
from coinfer.engines import minions as m
from coinfer.engines.minions.report import side_usage
from coinfer.errors import ConfigError

__all__ = ["PROTOCOLS", "MinionsBenchConfig", "load_questions", "run_minions_bench"]

DATA = Path(__file__).with_name("data") / "minions"
PROTOCOLS = ("remote-only", "local-only", "minion", "minions", "rag-bm25", "rag-dense")


@dataclass(frozen=True)
class MinionsBenchConfig:
    out: str
    limit: int | None = None
    questions: tuple[str, ...] = ()  # question ids to run (default: all, or --limit of them)
    protocols: tuple[str, ...] = PROTOCOLS
    local: str = "qwen2.5-coder-0.5b"
    remote: str = "qwen2.5-coder-1.5b"
    remote_base_url: str | None = None
    price_as: str = "gpt-4o"
    local_ctx: int = 16384
    remote_ctx: int = 32768
    parallel: int = 8
    chunk_chars: int = m.MinionsConfig().chunk_chars  # MinionS
    concurrency: bool = True  # also measure concurrent local jobs against one at a time

    def __post_init__(self) -> None:
        unknown = set(self.protocols) - set(PROTOCOLS)
        if unknown:
            raise ConfigError(f"unknown protocols {sorted(unknown)}; choose from {', '.join(PROTOCOLS)}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError("--limit must be at least 1")


def load_questions(limit: int | None = None, ids: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The questions, each with its document's text: those named in ``ids`` if any, then
    ``limit`` of them taken round-robin over the documents, so a short run still spans
    several."""
    rows = [json.loads(line) for line in (DATA / "questions.jsonl").read_text().splitlines() if line.strip()]
    if ids:
        unknown = set(ids) - {row["id"] for row in rows}
        if unknown:
            raise ConfigError(
                f"unknown question ids {sorted(unknown)}; they look like 'textwrap/0' "
                f"(see {DATA / 'questions.jsonl'})"
            )
        rows = [row for row in rows if row["id"] in ids]
    texts = {doc: (DATA / "docs" / doc).read_text() for doc in {row["doc"] for row in rows}}
    for row in rows:
        row["text"] = texts[row["doc"]]
    if limit is None:
        return rows
    by_doc: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_doc.setdefault(row["doc"], []).append(row)
    order = [
        q
        for i in range(max(map(len, by_doc.values())))
        for qs in by_doc.values()
        if i < len(qs)
        for q in [qs[i]]
    ]
    return order[:limit]


def is_correct(answer: str, pattern: str) -> bool:
    return re.search(pattern, answer, flags=re.IGNORECASE) is not None


def protocol_config(name: str, chunk_chars: int) -> m.ProtocolConfig:
    """The engine's config for one of the bench's protocols."""
    configs: dict[str, m.ProtocolConfig] = {
        "remote-only": m.DirectConfig(side="remote"),
        "local-only": m.DirectConfig(side="local"),
        "minion": m.MinionConfig(),
        "minions": m.MinionsConfig(chunk_chars=chunk_chars),
        "rag-bm25": m.RagConfig(retriever="bm25"),
        "rag-dense": m.RagConfig(retriever="dense"),
    }
    return configs[name]


@contextmanager
def _models(config: MinionsBenchConfig, log: Callable[[str], None]) -> Iterator[tuple[LocalChat, ChatModel]]:
    from coinfer.serve.process import ServerProcess

    log(f"loading the local model {config.local}…")
    local = open_local_chat(config.local, n_ctx=config.local_ctx, parallel=config.parallel)
    server = None
    try:
        url = config.remote_base_url
        if url is None:
            log(f"starting a loopback server for the remote model {config.remote}…")
            server = ServerProcess(config.remote, ctx=config.remote_ctx, max_batch=1).start()
            url = server.url
        yield local, OpenAIChat(config.remote, base_url=url)
    finally:
        local.model.close()
        if server is not None:
            server.stop()


def measure_concurrency(local: LocalChat, questions: list[dict[str, Any]], jobs: int) -> dict[str, float]:
    """Jobs/s for ``jobs`` MinionS-style jobs decoded together against one at a time, and
    the share of one-at-a-time time spent reading prompts (the same jobs cut to one
    token): batching speeds up decoding only, so ``1 / prefill_share`` bounds the speedup
    on a machine where a batch of prompts costs what its prompts cost one by one."""
    from coinfer.engines.minions import prompts
    from coinfer.retrieval import chunk_documents

    chunks = chunk_documents([(q["doc"], q["text"]) for q in questions[:jobs]], size=3000, overlap=0)[:jobs]
    requests = [
        prompts.job_request(c.text, questions[i % len(questions)]["question"], "", samples=1, max_tokens=96)
        for i, c in enumerate(chunks)
    ]
    out: dict[str, float] = {"jobs": len(requests)}
    for label, width, batch in (
        ("sequential", 1, requests),
        ("parallel", jobs, requests),
        ("prefill_only", 1, [replace(r, max_tokens=1) for r in requests]),
    ):
        runner = LocalChat(local.model, max_concurrent=width, keep=0)
        started = time.perf_counter()
        results = runner.chat_batch(batch)
        out[f"{label}_jobs_per_s"] = round(len(batch) / (time.perf_counter() - started), 3)
        if label == "sequential":
            out["prompt_tokens"] = sum(r.usage.prompt_tokens for r in results)
            out["completion_tokens"] = sum(r.usage.completion_tokens for r in results)
    out["speedup"] = round(out["parallel_jobs_per_s"] / out["sequential_jobs_per_s"], 3)
    out["prefill_share"] = round(out["sequential_jobs_per_s"] / out.pop("prefill_only_jobs_per_s"), 3)
    return out


def by_document(questions: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The questions grouped by document, groups in order of first appearance: each protocol
    then asks a document's questions one after another, so the server's and the local
    model's kept caches hold the document between them (as a provider's prompt cache would)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for q in questions:
        groups.setdefault(q["doc"], []).append(q)
    return list(groups.values())


def _run_one(
    name: str,
    question: dict[str, Any],
    config: MinionsBenchConfig,
    local: ChatModel,
    remote: ChatModel,
    price: Any,
) -> dict[str, Any]:
    """One protocol on one question: its result row, its trace written under ``config.out``."""
    started = time.perf_counter()
    documents = [(question["doc"], question["text"])]
    engine = protocol_config(name, config.chunk_chars)
    answer = m.generate(question["question"], documents, local=local, remote=remote, config=engine)
    row = _row(name, question, answer, time.perf_counter() - started, price)
    trace = {"question": question["question"], "answer": answer.text, "trace": answer.extras["trace"]}
    write_json(Path(config.out) / "traces" / f"{question['id'].replace('/', '-')}.{name}.json", trace)
    return row


def _progress(row: dict[str, Any]) -> str:
    verdict = "right" if row["correct"] else "wrong"
    return (
        f"{row['id']} {row['protocol']}: {verdict}, {row['remote_prompt_tokens']} remote prefill tokens, "
        f"{row['wall_s']} s: {row['answer'][:60]!r}"
    )


def _row(name: str, question: dict[str, Any], answer: Response, wall_s: float, price: Any) -> dict[str, Any]:
    remote, local = side_usage(answer, "remote"), side_usage(answer, "local")
    return {
        "id": question["id"],
        "protocol": name,
        "answer": answer.text,
        "correct": is_correct(answer.text, question["pattern"]),
        "best_effort": answer.extras["best_effort"],
        "rounds": answer.extras["rounds"],
        "remote_prompt_tokens": remote.prompt_tokens,
        "remote_completion_tokens": remote.completion_tokens,
        "remote_calls": remote.calls,
        "local_prompt_tokens": local.prompt_tokens,
        "local_completion_tokens": local.completion_tokens,
        "cost_usd": round(price.cost(remote), 6) if price else 0.0,
        "wall_s": round(wall_s, 2),
    }


def summarize(rows: list[dict[str, Any]], protocols: tuple[str, ...]) -> dict[str, Any]:
    """Per protocol: accuracy, mean remote tokens and dollars, and ratios to remote-only."""
    out: dict[str, Any] = {}
    for name in protocols:
        mine = [r for r in rows if r["protocol"] == name]
        if not mine:
            continue
        n = len(mine)
        out[name] = {
            "questions": n,
            "accuracy": round(sum(r["correct"] for r in mine) / n, 4),
            "remote_prompt_tokens": round(sum(r["remote_prompt_tokens"] for r in mine) / n, 1),
            "remote_completion_tokens": round(sum(r["remote_completion_tokens"] for r in mine) / n, 1),
            "cost_usd": round(sum(r["cost_usd"] for r in mine) / n, 6),
            "best_effort": sum(r["best_effort"] for r in mine),
            "wall_s": round(sum(r["wall_s"] for r in mine) / n, 2),
        }
    base = out.get("remote-only")
    for stats in out.values():
        if base and base["remote_prompt_tokens"]:
            stats["prefill_vs_remote_only"] = round(
                stats["remote_prompt_tokens"] / base["remote_prompt_tokens"], 4
            )
            total = base["remote_prompt_tokens"] + base["remote_completion_tokens"]
            mine_total = stats["remote_prompt_tokens"] + stats["remote_completion_tokens"]
            stats["tokens_vs_remote_only"] = round(mine_total / total, 4)
        if base and base["accuracy"]:
            stats["accuracy_vs_remote_only"] = round(stats["accuracy"] / base["accuracy"], 4)
    return out


def run_minions_bench(config: MinionsBenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    questions = load_questions(config.limit, config.questions)
    price = PriceTable().price_of(config.price_as)
    out = Path(config.out)
    report: dict[str, Any] = {
        "config": vars(config) | {"protocols": list(config.protocols)},
        "environment": environment(),
    }
    rows: list[dict[str, Any]] = []
    with _models(config, log) as (local, remote):
        if config.concurrency:
            log(f"measuring concurrent local jobs ({config.parallel} at once against one at a time)…")
            report["concurrency"] = measure_concurrency(local, questions, config.parallel)
        total = len(questions) * len(config.protocols)
        for group in by_document(questions):
            for name in config.protocols:
                for question in group:
                    rows.append(_run_one(name, question, config, local, remote, price))
                    log(f"[{len(rows)}/{total}] {_progress(rows[-1])}")
            report["summary"] = summarize(rows, config.protocols)
            report["results"] = rows
            _write(out, report, config)
    return report


def _write(out: Path, report: dict[str, Any], config: MinionsBenchConfig) -> None:
    write_json(out / "results.json", report)
    write_markdown(out / "results.md", results_markdown(report, config))
    _plot(out / "cost_accuracy.png", report["summary"], config.price_as)


def results_markdown(report: dict[str, Any], config: MinionsBenchConfig) -> str:
    lines = [
        f"# coinfer bench minions: local {config.local}, remote {config.remote}",
        "",
        f"Remote tokens priced as {config.price_as}.",
        "",
        "| protocol | questions | accuracy | remote prefill tokens | remote decode tokens | $ per question "
        "| prefill vs remote-only | accuracy vs remote-only | best effort | s per question |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in report["summary"].items():
        lines.append(
            f"| {name} | {s['questions']} | {s['accuracy']:.0%} | {s['remote_prompt_tokens']:,.0f} "
            f"| {s['remote_completion_tokens']:,.0f} | {s['cost_usd']:.5f} "
            f"| {s.get('prefill_vs_remote_only', '–')} | {s.get('accuracy_vs_remote_only', '–')} "
            f"| {s['best_effort']} | {s['wall_s']} |"
        )
    c = report.get("concurrency")
    if c:
        lines += [
            "",
            f"Local jobs: {c['jobs']} decoded together {c['parallel_jobs_per_s']} jobs/s, one at a time "
            f"{c['sequential_jobs_per_s']} jobs/s: {c['speedup']}x. Reading the prompts took "
            f"{c['prefill_share']:.0%} of the one-at-a-time time ({c['prompt_tokens']:,} prompt tokens, "
            f"{c['completion_tokens']:,} output tokens); batching speeds up the rest.",
        ]
    return "\n".join(lines) + "\n"


def _plot(path: Path, summary: dict[str, Any], priced_as: str) -> None:
    """Accuracy against remote dollars per question (paper 000, Figure 2)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, s in summary.items():
        ax.scatter(s["cost_usd"], s["accuracy"], s=40)
        ax.annotate(
            name, (s["cost_usd"], s["accuracy"]), textcoords="offset points", xytext=(5, 3), fontsize=8
        )
    ax.set_xlabel(f"remote cost per question, $ (priced as {priced_as})")
    ax.set_ylabel("accuracy")
    ax.set_xscale("symlog", linthresh=1e-4)
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
