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

With ``repeats`` above 1, every level runs that many times on a fresh server each, the
systems' runs interleaved (one run of each system, then the next round, in the reverse
order every other round), so that a minute when the machine ran slow weighs on every
system alike: a CPU bench moves 10-20% from one run to the next, more than the gaps it
measures. Throughput is the median run's, with each run's listed (``tok_s_runs``); the
latencies and identical texts pool every run's streams.

Per level: aggregate completion tokens/s (all tokens over the time from the first
request sent to the last token), time to first token and inter-token latency (a
request's seconds per token after its first) at p50 and p95, errors, honest 429s, requests
sent again because the server closed their connection unanswered (``stream_chat``), and how
many texts equal the same request served alone (greedy, or sampled with the same seed:
``--concurrency-temperature``; every server then draws from the whole distribution at that
temperature, as the OpenAI API defines it: ``system_flags``). Every fourth prompt is held
out of any tuning; both halves are reported.

``shared_tokens``: every request opens with one system message of about that many
tokens (a team assistant's long instructions, a shared document: the start of CPython's
``shlex`` module, four characters a token): the case a prefix cache is for.

``prompts``: a JSON-lines file of the user's own prompts (``workloads.load_prompts``) in
place of the built-in suite (``per_category`` then unused), so that a team measures on
what it serves; every fourth is held out as in the suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from coinfer.bench.serve_load import Stream, Work, clients_at_once
from coinfer.errors import ConfigError

__all__ = [
    "SYSTEMS",
    "ConcurrencyConfig",
    "cell",
    "firsts",
    "level_requests",
    "level_row",
    "markdown_table",
    "pct",
    "run_concurrency",
    "run_order",
    "start_system",
    "suite_of",
    "system_flags",
]

# name -> (server, its flags); coinfer's flags follow ``coinfer serve``, llama-server's its own
SYSTEMS: dict[str, tuple[str, list[str]]] = {
    "coinfer-plain": ("coinfer", ["--engine", "plain"]),
    "coinfer-speculative": ("coinfer", ["--engine", "speculative", "--draft", "auto"]),
    "llama-server-plain": ("llama-server", []),
    "llama-server-ngram-mod": ("llama-server", ["--spec-type", "ngram-mod"]),
}
# llama-server's sampling as the OpenAI API defines it: no top-k, top-p or min-p cut
OPENAI_SAMPLING = ["--top-k", "0", "--top-p", "1.0", "--min-p", "0.0"]


@dataclass(frozen=True, kw_only=True)
class ConcurrencyConfig:
    """``slots``: requests each server decodes at once (coinfer's ``--max-batch``,
    llama-server's ``-np``); ``per_category``: prompts of each of the suite's three kinds;
    ``ctx``: each request's window; ``prompts``: a JSON-lines file in place of the suite."""

    model: str = "qwen2.5-coder-1.5b"
    levels: tuple[int, ...] = (1, 4, 16, 32)
    max_tokens: int = 128
    slots: int = 8
    per_category: int = 4
    ctx: int = 4096
    systems: tuple[str, ...] = tuple(SYSTEMS)
    deadline_s: float = 3600.0
    shared_tokens: int = 0
    repeats: int = 1  # runs of each level, interleaved across systems (see the module)
    temperature: float = 0.0  # greedy; above 0, each request sampled with its prompt's index as seed
    prompts: str | None = None

    def __post_init__(self) -> None:
        if (
            not self.levels
            or min(self.levels) < 1
            or self.max_tokens < 2
            or min(self.slots, self.per_category, self.repeats) < 1
            or not 0.0 <= self.temperature <= 2.0
        ):
            raise ConfigError(
                "levels of >= 1 clients, max_tokens >= 2, slots, per_category and repeats >= 1, and a "
                "temperature in [0, 2], please"
            )
        unknown = set(self.systems) - set(SYSTEMS)
        if unknown:
            raise ConfigError(f"unknown systems {sorted(unknown)}", hint=f"choose among {', '.join(SYSTEMS)}")


def pct(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``values`` by linear interpolation; None when empty."""
    return round(float(np.quantile(values, q)), 4) if values else None


def _half(streams: list[Stream], reference: dict[int, str], held_out: bool) -> dict[str, Any]:
    mine = [s for s in streams if (s.prompt % 4 == 3) == held_out and s.error is None]
    return {
        "requests": len(mine),
        "ttft_p50_s": pct(firsts(mine), 0.5),
        "itl_p50_s": pct([x for s in mine if (x := s.inter_token_s) is not None], 0.5),
        "identical": sum(s.text == reference.get(s.prompt) for s in mine),
    }


Run = tuple[list[Stream], float]  # one run of a level: its streams and its wall seconds


def level_row(clients: int, runs: list[Run], reference: dict[int, str]) -> dict[str, Any]:
    """One level's figures from its runs (see the module): throughput per run and the
    median run's; latencies, errors and identical texts over every run's streams."""
    streams = [s for run, _ in runs for s in run]
    done = [s for s in streams if s.error is None]
    rates = [_rate(run, wall_s) for run, wall_s in runs]
    first_s = firsts(done)
    gaps = [x for s in done if (x := s.inter_token_s) is not None]
    return {
        "clients": clients,
        "runs": len(runs),
        "requests": len(streams),
        "tokens": sum(s.tokens for s in done),
        "wall_s": round(sum(wall_s for _, wall_s in runs), 2),
        "tok_s": round(float(np.median(rates)), 3),
        "tok_s_runs": rates,
        "ttft_p50_s": pct(first_s, 0.5),
        "ttft_p50_s_runs": [_median_ttft(run) for run, _ in runs],
        "ttft_p95_s": pct(first_s, 0.95),
        "itl_p50_s": pct(gaps, 0.5),
        "itl_p95_s": pct(gaps, 0.95),
        "errors": [f"prompt {s.prompt}: {s.error}" for s in streams if s.error is not None],
        "rate_limited": sum(s.rate_limited for s in streams),
        "resent": sum(s.resent for s in streams),
        "identical": sum(s.text == reference.get(s.prompt) for s in done),
        "tuned": _half(streams, reference, held_out=False),
        "held_out": _half(streams, reference, held_out=True),
        # each run's requests as (prompt, sent, first token, last token, tokens), seconds from the run's start
        "timelines": [[_timeline(s) for s in run] for run, _ in runs],
    }


def _timeline(s: Stream) -> list[float | int | None]:
    at = s.sent_s or 0.0
    first, last = (None if x is None else round(at + x, 3) for x in (s.first_s, s.last_s))
    return [s.prompt, s.sent_s, first, last, s.tokens]


def firsts(streams: list[Stream]) -> list[float]:
    """The times to first token of the requests that finished."""
    return [s.first_s for s in streams if s.error is None and s.first_s is not None]


def _median_ttft(streams: list[Stream]) -> float | None:
    """A run's median time to first token, over the requests that finished."""
    return pct(firsts(streams), 0.5)


def _rate(streams: list[Stream], wall_s: float) -> float:
    """A run's aggregate completion tokens/s."""
    tokens = sum(s.tokens for s in streams if s.error is None)
    return round(tokens / wall_s, 3) if wall_s > 0 else 0.0


def _start(name: str, config: ConcurrencyConfig) -> tuple[str, Callable[[], None]] | None:
    """``name``'s server, alone: its OpenAI base URL and how to stop it (None: not built)."""
    kind, flags = system_flags(name, config.temperature)
    return start_system(kind, flags, model=config.model, ctx=config.ctx, slots=config.slots)


def system_flags(name: str, temperature: float) -> tuple[str, list[str]]:
    """``name``'s server and its flags for requests at ``temperature``. llama-server draws a
    token through top-k 40, top-p 0.95 and min-p 0.05 unless told otherwise, so a sampled
    request would mean a narrower distribution there (nearer greedy, its drafts accepted
    more often) than the OpenAI API's whole vocabulary at that temperature, which coinfer
    samples: at a temperature above 0 it starts with those cuts off (``OPENAI_SAMPLING``),
    and both draw from the same distribution."""
    kind, flags = SYSTEMS[name]
    if kind == "llama-server" and temperature > 0:
        return kind, [*flags, *OPENAI_SAMPLING]
    return kind, flags


def start_system(
    kind: str, flags: list[str], *, model: str, ctx: int, slots: int
) -> tuple[str, Callable[[], None]] | None:
    """A ``coinfer`` or ``llama-server`` server of ``model`` with ``flags``, alone: its
    OpenAI base URL and how to stop it (None: llama-server is not built here)."""
    from coinfer import catalog
    from coinfer.bench.peers import launch_llama_server, llama_server_binary
    from coinfer.serve.process import ServerProcess, stop_process

    if kind == "coinfer":
        server = ServerProcess(model, ctx=ctx, max_batch=slots, extra_args=flags).start()
        return server.url, server.stop
    binary = llama_server_binary()
    if binary is None:
        return None
    proc, base = launch_llama_server(binary, str(catalog.prepare(model)), flags, None, slots=slots, ctx=ctx)
    return base + "/v1", lambda: stop_process(proc, 30.0)


def level_requests(clients: int, prompts: int) -> int:
    """Requests at a level of ``clients`` (above 1): three waves of 4 clients, at least
    one request a client, and no prompt twice where the suite has enough of them (a
    repeated prompt is an answer a server's n-gram pool or prompt cache has already seen)."""
    return max(clients, min(prompts, max(clients, 12)))


def _level(
    name: str, config: ConcurrencyConfig, prompts: list[list[dict[str, str]]], clients: int
) -> Run | None:
    """One run of a level on a server of its own, started fresh: no run reads a prompt an
    earlier one left in a cache (None: the system is not built here)."""
    started = _start(name, config)
    if started is None:
        return None
    url, stop = started
    try:
        requests = len(prompts) if clients == 1 else level_requests(clients, len(prompts))
        work: Work = [(p, None) for p in prompts]
        order = [i % len(prompts) for i in range(requests)]
        run = clients_at_once(url, config.model, work, order, clients, max_tokens=config.max_tokens,
                              deadline_s=config.deadline_s, temperature=config.temperature)  # fmt: skip
        return asyncio.run(run)
    finally:
        stop()


def _alone(
    config: ConcurrencyConfig, prompts: list[list[dict[str, str]]], log: Callable[[str], None]
) -> dict[str, Run]:
    """Each system's prompts streamed alone, one after another (the reference texts, and
    the 1-client level's first run); the systems not built here left out."""
    alone: dict[str, Run] = {}
    for name in config.systems:
        ran = _level(name, config, prompts, 1)
        if ran is None:
            log(f"{name}: not built here (coinfer bench speculative --build-peers builds it); left out")
        else:
            alone[name] = ran
            _log_run(log, name, 1, ran)
    return alone


def _log_run(log: Callable[[str], None], name: str, clients: int, run: Run) -> None:
    streams, wall_s = run
    errors, resent = sum(s.error is not None for s in streams), sum(s.resent for s in streams)
    rate, ttft = _rate(streams, wall_s), _median_ttft(streams)
    again = f" ({resent} sent again: closed unanswered)" if resent else ""
    log(f"{name:24} {clients:3} clients: {rate:7.2f} tok/s, TTFT p50 {ttft} s, {errors} errors{again}")


def _interleaved_runs(
    config: ConcurrencyConfig,
    prompts: list[list[dict[str, str]]],
    alone: dict[str, Run],
    log: Callable[[str], None],
) -> dict[tuple[str, int], list[Run]]:
    """Every level's runs, ``repeats`` rounds of one run per system, the systems in the
    reverse order every other round; the alone runs count as the 1-client level's first."""
    runs: dict[tuple[str, int], list[Run]] = {(n, c): [] for n in alone for c in config.levels}
    for round_, clients, name in run_order(list(alone), config.levels, config.repeats):
        if round_ == 0 and clients == 1:
            runs[(name, clients)].append(alone[name])
            continue
        ran = _level(name, config, prompts, clients)
        assert ran is not None  # built: it ran alone
        _log_run(log, name, clients, ran)
        runs[(name, clients)].append(ran)
    return runs


def run_order(names: Sequence[str], levels: Sequence[int], repeats: int) -> list[tuple[int, int, str]]:
    """(round, clients, system) in the order they run: each round every level, each level
    every system, the systems in the reverse order every other round (so neither always
    goes first on a machine that warms or cools as it runs)."""
    return [
        (round_, clients, name)
        for round_ in range(repeats)
        for clients in levels
        for name in (names if round_ % 2 == 0 else names[::-1])
    ]


def run_concurrency(config: ConcurrencyConfig, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Every system alone, at every level, ``repeats`` times interleaved; the rows by
    system and the config."""
    from coinfer.bench.report import environment

    suite = suite_of(config)
    opening = shared_opening(config.shared_tokens)
    prompts = [[*opening, *p["messages"]] for p in suite]
    alone = _alone(config, prompts, log)
    runs = _interleaved_runs(config, prompts, alone, log)
    systems: dict[str, list[dict[str, Any]]] = {}
    for name, (streams, _) in alone.items():
        reference = {s.prompt: s.text for s in streams if s.error is None}
        systems[name] = [level_row(c, runs[(name, c)], reference) for c in config.levels]
    return {
        "config": asdict(config),
        "environment": environment(),
        "prompts": [{"id": p["id"], "held_out": i % 4 == 3} for i, p in enumerate(suite)],
        "systems": systems,
        # a prompt whose text alone failed has no reference: its texts count as not identical
        "reference_errors": {
            name: [f"prompt {s.prompt}: {s.error}" for s in streams if s.error is not None]
            for name, (streams, _) in alone.items()
        },
        "reference_resent": {name: sum(s.resent for s in streams) for name, (streams, _) in alone.items()},
    }


def suite_of(config: ConcurrencyConfig) -> list[dict[str, Any]]:
    """The prompts a run streams: the file's (``config.prompts``), else the built-in suite."""
    from coinfer.bench.workloads import build_suite, load_prompts

    return load_prompts(config.prompts) if config.prompts else build_suite(config.per_category)


def shared_opening(tokens: int) -> list[dict[str, str]]:
    """The system message every request opens with (none for 0 tokens; see the module)."""
    if tokens <= 0:
        return []
    from coinfer.bench.minions import DATA

    text = (DATA / "docs" / "shlex.py.txt").read_text()
    if len(text) < 4 * tokens:
        raise ConfigError(f"the shared opening holds at most {len(text) // 4} tokens, asked {tokens}")
    return [{"role": "system", "content": "Answer with this module in mind:\n\n" + text[: 4 * tokens]}]


def cell(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def _rates(row: dict[str, Any]) -> str:
    """The median run's tokens/s, and each run's where there were several."""
    runs = row.get("tok_s_runs", [])
    each = f" ({', '.join(f'{x:.2f}' for x in runs)})" if len(runs) > 1 else ""
    return f"{row['tok_s']:.2f}{each}"


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
                f"| {name} | {r['clients']} | {_rates(r)} | {cell(r['ttft_p50_s'], ' s')} / "
                f"{cell(r['ttft_p95_s'], ' s')} | {cell(itl[0])} / {cell(itl[1])} | {len(r['errors'])} | "
                f"{r['rate_limited']} | {r['identical']}/{r['requests']} | "
                f"{cell(held['ttft_p50_s'], ' s')}, {held['identical']}/{held['requests']} |"
            )
    for name, rows in report["systems"].items():
        # the alone run is the 1-client level's first: counted once where that level is a row
        alone = 0 if any(r["clients"] == 1 for r in rows) else report.get("reference_resent", {}).get(name, 0)
        resent = alone + sum(r.get("resent", 0) for r in rows)
        if resent:
            lines.append(
                f"\n{name} closed {resent} connection(s) without answering; those requests were sent "
                "again, as the client's own retries would send them (`resent`)"
            )
    for name, errors in report.get("reference_errors", {}).items():
        if errors:
            lines.append(
                f"\n{name}'s alone run (each prompt's reference text) failed {len(errors)} time(s), "
                f"so those prompts' texts count as not identical: {'; '.join(errors)}"
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
