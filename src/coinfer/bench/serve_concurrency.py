"""Serving under load: one GGUF served by each system alone — ``coinfer serve`` with each
engine that applies, and llama.cpp's ``llama-server`` (plain and its best n-gram mode,
where it is built: ``coinfer bench speculative --build-peers``) — at 1, 4, 16 and 32
concurrent streaming clients of the official ``openai`` client.

Per system and level, the server starts alone and fresh (no level finds a prompt an
earlier one left in a cache); every prompt is first streamed alone, one after another
(the 1-client level, and each prompt's reference text); then at each higher level
``clients`` clients send ``level_requests`` requests, the prompts in turn, each client
its next request as soon as its last ends. No prompt repeats within a level when the
suite holds at least as many prompts as clients (``per_category`` >= clients / 3): a
repeated prompt is an answer that llama-server's n-gram pool (``ngram-mod``) or a prompt
cache has seen already.

Per level: aggregate completion tokens/s (all tokens over the time from the first
request sent to the last token), time to first token and inter-token latency (a
request's seconds per token after its first) at p50 and p95, errors, honest 429s, and how
many greedy texts equal the same request served alone. Every fourth prompt is held out
of any tuning; both halves are reported.

``shared_tokens``: every request opens with one system message of about that many
tokens (a team assistant's long instructions, a shared document: the start of CPython's
``shlex`` module, four characters a token): the case a prefix cache is for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from coinfer.bench.serve_load import Stream, Work, clients_at_once
from coinfer.errors import ConfigError

__all__ = ["SYSTEMS", "ConcurrencyConfig", "level_requests", "level_row", "markdown_table", "run_concurrency"]

# name -> (server, its flags); coinfer's flags follow ``coinfer serve``, llama-server's its own
SYSTEMS: dict[str, tuple[str, list[str]]] = {
    "coinfer-plain": ("coinfer", ["--engine", "plain"]),
    "coinfer-speculative": ("coinfer", ["--engine", "speculative", "--draft", "auto"]),
    "llama-server-plain": ("llama-server", []),
    "llama-server-ngram-mod": ("llama-server", ["--spec-type", "ngram-mod"]),
}


@dataclass(frozen=True, kw_only=True)
class ConcurrencyConfig:
    """``slots``: requests each server decodes at once (coinfer's ``--max-batch``,
    llama-server's ``-np``); ``per_category``: prompts of each of the suite's three kinds;
    ``ctx``: each request's window."""

    model: str = "qwen2.5-coder-1.5b"
    levels: tuple[int, ...] = (1, 4, 16, 32)
    max_tokens: int = 128
    slots: int = 8
    per_category: int = 4
    ctx: int = 4096
    systems: tuple[str, ...] = tuple(SYSTEMS)
    deadline_s: float = 3600.0
    shared_tokens: int = 0

    def __post_init__(self) -> None:
        if (
            not self.levels
            or min(self.levels) < 1
            or self.max_tokens < 2
            or min(self.slots, self.per_category) < 1
        ):
            raise ConfigError("levels of >= 1 clients, max_tokens >= 2, slots and per_category >= 1, please")
        unknown = set(self.systems) - set(SYSTEMS)
        if unknown:
            raise ConfigError(f"unknown systems {sorted(unknown)}", hint=f"choose among {', '.join(SYSTEMS)}")


def _pct(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``values`` by linear interpolation; None when empty."""
    return round(float(np.quantile(values, q)), 4) if values else None


def _half(streams: list[Stream], reference: dict[int, str], held_out: bool) -> dict[str, Any]:
    mine = [s for s in streams if (s.prompt % 4 == 3) == held_out and s.error is None]
    return {
        "requests": len(mine),
        "ttft_p50_s": _pct([s.first_s for s in mine if s.first_s is not None], 0.5),
        "itl_p50_s": _pct([x for s in mine if (x := s.inter_token_s) is not None], 0.5),
        "identical": sum(s.text == reference.get(s.prompt) for s in mine),
    }


def level_row(
    clients: int, streams: list[Stream], wall_s: float, reference: dict[int, str]
) -> dict[str, Any]:
    """One level's figures from its streams (see the module)."""
    done = [s for s in streams if s.error is None]
    tokens = sum(s.tokens for s in done)
    firsts = [s.first_s for s in done if s.first_s is not None]
    gaps = [x for s in done if (x := s.inter_token_s) is not None]
    return {
        "clients": clients,
        "requests": len(streams),
        "tokens": tokens,
        "wall_s": round(wall_s, 2),
        "tok_s": round(tokens / wall_s, 3) if wall_s > 0 else 0.0,
        "ttft_p50_s": _pct(firsts, 0.5),
        "ttft_p95_s": _pct(firsts, 0.95),
        "itl_p50_s": _pct(gaps, 0.5),
        "itl_p95_s": _pct(gaps, 0.95),
        "errors": [f"prompt {s.prompt}: {s.error}" for s in streams if s.error is not None],
        "rate_limited": sum(s.rate_limited for s in streams),
        "identical": sum(s.text == reference.get(s.prompt) for s in done),
        "tuned": _half(streams, reference, held_out=False),
        "held_out": _half(streams, reference, held_out=True),
    }


def _start(name: str, config: ConcurrencyConfig) -> tuple[str, Callable[[], None]] | None:
    """``name``'s server, alone: its OpenAI base URL and how to stop it (None: not built)."""
    from coinfer import catalog
    from coinfer.bench.peers import launch_llama_server, llama_server_binary
    from coinfer.serve.process import ServerProcess, stop_process

    kind, flags = SYSTEMS[name]
    if kind == "coinfer":
        server = ServerProcess(config.model, ctx=config.ctx, max_batch=config.slots, extra_args=flags).start()
        return server.url, server.stop
    binary = llama_server_binary()
    if binary is None:
        return None
    path = str(catalog.prepare(config.model))
    proc, base = launch_llama_server(binary, path, flags, None, slots=config.slots, ctx=config.ctx)
    return base + "/v1", lambda: stop_process(proc, 30.0)


def level_requests(clients: int, prompts: int) -> int:
    """Requests at a level of ``clients`` (above 1): three waves of 4 clients, at least
    one request a client, and no prompt twice where the suite has enough of them (a
    repeated prompt is an answer a server's n-gram pool or prompt cache has already seen)."""
    return max(clients, min(prompts, max(clients, 12)))


def _level(
    name: str, config: ConcurrencyConfig, prompts: list[list[dict[str, str]]], clients: int
) -> tuple[list[Stream], float] | None:
    """One level on a server of its own, started fresh: no level reads a prompt an earlier
    level left in a cache (None: the system is not built here)."""
    started = _start(name, config)
    if started is None:
        return None
    url, stop = started
    try:
        requests = len(prompts) if clients == 1 else level_requests(clients, len(prompts))
        work: Work = [(p, None) for p in prompts]
        order = [i % len(prompts) for i in range(requests)]
        run = clients_at_once(url, config.model, work, order, clients, max_tokens=config.max_tokens,
                              deadline_s=config.deadline_s)  # fmt: skip
        return asyncio.run(run)
    finally:
        stop()


def _system(
    name: str, config: ConcurrencyConfig, prompts: list[list[dict[str, str]]], log: Callable[[str], None]
) -> list[dict[str, Any]] | None:
    """Every level of ``name``, the prompts alone first (the reference texts)."""
    alone = _level(name, config, prompts, 1)
    if alone is None:
        log(f"{name}: not built here (coinfer bench speculative --build-peers builds it); left out")
        return None
    reference = {s.prompt: s.text for s in alone[0] if s.error is None}
    rows: list[dict[str, Any]] = []
    for clients in config.levels:
        ran = alone if clients == 1 else _level(name, config, prompts, clients)
        assert ran is not None
        rows.append(level_row(clients, *ran, reference))
        r = rows[-1]
        log(
            f"{name:24} {clients:3} clients: {r['tok_s']:7.2f} tok/s, TTFT p50 {r['ttft_p50_s']} s, "
            f"{len(r['errors'])} errors, {r['identical']}/{r['requests']} identical"
        )
    return rows


def run_concurrency(config: ConcurrencyConfig, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Every system in turn, alone, at every level; the rows by system and the config."""
    from coinfer.bench.report import environment
    from coinfer.bench.workloads import build_suite

    suite = build_suite(config.per_category)
    opening = shared_opening(config.shared_tokens)
    prompts = [[*opening, *p["messages"]] for p in suite]
    systems: dict[str, list[dict[str, Any]]] = {}
    for name in config.systems:
        rows = _system(name, config, prompts, log)
        if rows is not None:
            systems[name] = rows
    return {
        "config": asdict(config),
        "environment": environment(),
        "prompts": [{"id": p["id"], "held_out": i % 4 == 3} for i, p in enumerate(suite)],
        "systems": systems,
    }


def shared_opening(tokens: int) -> list[dict[str, str]]:
    """The system message every request opens with (none for 0 tokens; see the module)."""
    if tokens <= 0:
        return []
    from coinfer.bench.minions import DATA

    text = (DATA / "docs" / "shlex.py.txt").read_text()
    if len(text) < 4 * tokens:
        raise ConfigError(f"the shared opening holds at most {len(text) // 4} tokens, asked {tokens}")
    return [{"role": "system", "content": "Answer with this module in mind:\n\n" + text[: 4 * tokens]}]


def _cell(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def markdown_table(report: dict[str, Any]) -> str:
    """One row per system and level: throughput, TTFT and ITL (p50 / p95), errors, texts
    identical to the request alone, and the held-out half's TTFT p50 and identical texts."""
    lines = [
        "| system | clients | tok/s | TTFT p50 / p95 | ITL p50 / p95 (ms) | errors | 429s | identical "
        "| held out: TTFT p50, identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in report["systems"].items():
        for r in rows:
            itl = [None if x is None else x * 1000 for x in (r["itl_p50_s"], r["itl_p95_s"])]
            held = r["held_out"]
            lines.append(
                f"| {name} | {r['clients']} | {r['tok_s']:.2f} | {_cell(r['ttft_p50_s'], ' s')} / "
                f"{_cell(r['ttft_p95_s'], ' s')} | {_cell(itl[0])} / {_cell(itl[1])} | {len(r['errors'])} | "
                f"{r['rate_limited']} | {r['identical']}/{r['requests']} | "
                f"{_cell(held['ttft_p50_s'], ' s')}, {held['identical']}/{held['requests']} |"
            )
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Any) -> bool:
    """Throughput and median TTFT against clients, a line per system (False: no matplotlib)."""
    from coinfer.bench.report import pyplot

    plt = pyplot()
    if plt is None:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for name, rows in report["systems"].items():
        clients = [r["clients"] for r in rows]
        left.plot(clients, [r["tok_s"] for r in rows], marker="o", label=name)
        right.plot(clients, [r["ttft_p50_s"] or 0 for r in rows], marker="o", label=name)
    for ax, title in ((left, "aggregate completion tokens/s"), (right, "median time to first token (s)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent streaming clients")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    left.legend(fontsize=8)
    fig.suptitle(f"{report['config']['model']}, {report['config']['max_tokens']} tokens per answer, greedy")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
