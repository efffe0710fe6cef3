"""Multi-turn chats with think time (``coinfer bench serve --part chat``): ``clients``
conversations at once, each ``turns`` turns, each client waiting ``think_s`` seconds between
a reply and its next question (a user reading, an agent running a tool), against servers of
``slots`` slots. Turn 1 is a prompt of the serve suite (every fourth conversation held
out); later turns ask short follow-ups over the whole history.

While a client thinks, the others' requests take the server's slots, so a server that keeps
only what its slots hold reads each returning chat from its start. coinfer keeps the caches
that give way in host memory (``coinfer serve --cache-ram``), as llama-server does (its own
``--cache-ram``, 8192 MiB by default); ``coinfer-speculative-nostore`` is coinfer without.

Per system and run: completion tokens per second over the run (think time included, the
same for every system), the median time to first token of turn 1 and of the later turns
(tuned and held-out conversations apart), and the later turns' prompt tokens that the
server said it took from a cache (coinfer: ``usage.prompt_tokens_details.cached_tokens``;
llama-server: ``timings.cache_n``). Runs of the systems interleave, each on a server of its
own, started fresh.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from coinfer.bench.serve_concurrency import cell, firsts, pct, start_system
from coinfer.bench.serve_load import Stream, stream_chat
from coinfer.errors import ConfigError

__all__ = ["SYSTEMS", "ChatConfig", "markdown_table", "run_chat", "system_row"]

# name -> (server, its flags), as ``serve_concurrency.SYSTEMS``
SYSTEMS: dict[str, tuple[str, list[str]]] = {
    "coinfer-speculative": ("coinfer", ["--engine", "speculative", "--draft", "auto"]),
    "coinfer-speculative-nostore": (
        "coinfer",
        ["--engine", "speculative", "--draft", "auto", "--cache-ram", "0"],
    ),
    "llama-server-ngram-mod": ("llama-server", ["--spec-type", "ngram-mod"]),
}
FOLLOW_UPS = ("Now add type hints and a docstring.", "Write three unit tests for it.", "Explain it briefly.")


@dataclass(frozen=True, kw_only=True)
class ChatConfig:
    model: str = "qwen2.5-coder-1.5b"
    clients: int = 12
    turns: int = 3
    think_s: float = 5.0
    max_tokens: int = 96
    slots: int = 8
    ctx: int = 4096
    per_category: int = 4
    systems: tuple[str, ...] = tuple(SYSTEMS)
    repeats: int = 1
    deadline_s: float = 3600.0

    def __post_init__(self) -> None:
        if min(self.clients, self.turns, self.slots, self.per_category, self.repeats) < 1 or self.think_s < 0:
            raise ConfigError("clients, turns, slots, per_category and repeats >= 1 and think_s >= 0, please")
        if self.turns < 2 or self.max_tokens < 2:
            raise ConfigError("a chat needs 2 or more turns and max_tokens >= 2", hint="e.g. --turns 3")
        unknown = set(self.systems) - set(SYSTEMS)
        if unknown:
            raise ConfigError(f"unknown systems {sorted(unknown)}", hint=f"choose among {', '.join(SYSTEMS)}")


@dataclass
class Chat:
    """One conversation: its opening's index in the suite and its turns, each as its client
    saw it (``Stream.prompt``: the opening's index too)."""

    opening: int
    turns: list[Stream] = field(default_factory=list)


async def _conversation(
    client: Any, config: ChatConfig, index: int, opening: list[dict[str, str]], deadline: float
) -> Chat:
    chat, messages = Chat(index), list(opening)
    for t in range(config.turns):
        turn = await stream_chat(client, config.model, messages, config.max_tokens, index, deadline)
        chat.turns.append(turn)
        if turn.error is not None or t == config.turns - 1:
            break
        messages += [
            {"role": "assistant", "content": turn.text},
            {"role": "user", "content": FOLLOW_UPS[t % len(FOLLOW_UPS)]},
        ]
        await asyncio.sleep(config.think_s)
    return chat


async def _chats(
    url: str, config: ChatConfig, openings: list[list[dict[str, str]]]
) -> tuple[list[Chat], float]:
    import openai

    client = openai.AsyncOpenAI(base_url=url, api_key="bench", timeout=config.deadline_s, max_retries=0)
    t0, deadline = time.perf_counter(), time.monotonic() + config.deadline_s
    try:
        chats = await asyncio.gather(
            *[_conversation(client, config, i, o, deadline) for i, o in enumerate(openings)]
        )
    finally:
        await client.close()
    return list(chats), time.perf_counter() - t0


Run = tuple[list[Chat], float]  # one run: its conversations and its wall seconds


def _one_run(name: str, config: ChatConfig, openings: list[list[dict[str, str]]]) -> Run | None:
    kind, flags = SYSTEMS[name]
    started = start_system(kind, flags, model=config.model, ctx=config.ctx, slots=config.slots)
    if started is None:
        return None
    url, stop = started
    try:
        return asyncio.run(_chats(url, config, openings))
    finally:
        stop()


def _later_ttft(chats: list[Chat], held_out: bool | None = None) -> float | None:
    """The median time to first token of turns 2 on (of the held-out or tuned chats alone)."""
    picked = [c for c in chats if held_out is None or (c.opening % 4 == 3) == held_out]
    return pct(firsts([t for c in picked for t in c.turns[1:]]), 0.5)


def system_row(runs: list[Run]) -> dict[str, Any]:
    """A system's figures: per run, and the median run's throughput."""
    per_run = [_run_row(chats, wall_s) for chats, wall_s in runs]
    rates = [float(r["tok_s"]) for r in per_run]
    return {"tok_s": round(float(np.median(rates)), 3), "tok_s_runs": rates, "runs": per_run}


def _run_row(chats: list[Chat], wall_s: float) -> dict[str, Any]:
    done = [t for c in chats for t in c.turns if t.error is None]
    later = [t for c in chats for t in c.turns[1:]]
    return {
        "wall_s": round(wall_s, 2),
        "tok_s": round(sum(t.tokens for t in done) / wall_s, 3) if wall_s > 0 else 0.0,
        "ttft_turn1_p50_s": pct(firsts([t for c in chats for t in c.turns[:1]]), 0.5),
        "ttft_later_p50_s": _later_ttft(chats),
        "ttft_later_tuned_p50_s": _later_ttft(chats, held_out=False),
        "ttft_later_held_out_p50_s": _later_ttft(chats, held_out=True),
        "later_prompt_tokens": sum(t.prompt_tokens for t in later),
        "later_cached_tokens": sum(t.cached_tokens for t in later),
        "errors": [f"chat {c.opening}: {t.error}" for c in chats for t in c.turns if t.error is not None],
        "resent": sum(t.resent for c in chats for t in c.turns),  # closed unanswered, sent again
        "texts": [[t.text for t in c.turns] for c in chats],
    }


def run_chat(config: ChatConfig, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Every system ``repeats`` times, the systems' runs interleaved (reversed every other
    round); the rows by system and the config. A system not built here is left out."""
    from coinfer.bench.report import environment
    from coinfer.bench.workloads import build_suite

    suite = build_suite(config.per_category)
    openings = [suite[i % len(suite)]["messages"] for i in range(config.clients)]
    runs: dict[str, list[Run]] = {n: [] for n in config.systems}
    for round_ in range(config.repeats):
        for name in config.systems if round_ % 2 == 0 else config.systems[::-1]:
            ran = _one_run(name, config, openings)
            if ran is None:
                log(f"{name}: not built here (coinfer bench speculative --build-peers builds llama-server)")
                continue
            runs[name].append(ran)
            chats, wall_s = ran
            tokens = sum(t.tokens for c in chats for t in c.turns if t.error is None)
            log(f"  {name}: {tokens / wall_s:.2f} tok/s, later turns' TTFT p50 {_later_ttft(chats)} s")
    return {
        "config": asdict(config),
        "environment": environment(),
        "openings": [
            {"id": suite[i % len(suite)]["id"], "held_out": i % 4 == 3} for i in range(config.clients)
        ],
        "systems": {name: system_row(r) for name, r in runs.items() if r},
    }


def markdown_table(report: dict[str, Any]) -> str:
    """One row per system and run: throughput, TTFT of turn 1 and of the later turns (the
    held-out chats' apart), and the later turns' prompt tokens a cache held."""
    lines = [
        "| system | run | tok/s | TTFT turn 1 p50 | later turns TTFT p50 | held out: later TTFT p50 "
        "| later turns' prompt tokens from a cache | errors |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in report["systems"].items():
        for i, r in enumerate(row["runs"], 1):
            share = r["later_cached_tokens"] / r["later_prompt_tokens"] if r["later_prompt_tokens"] else 0.0
            lines.append(
                f"| {name} | {i} | {r['tok_s']:.2f} | {cell(r['ttft_turn1_p50_s'], ' s')} | "
                f"{cell(r['ttft_later_p50_s'], ' s')} | {cell(r['ttft_later_held_out_p50_s'], ' s')} | "
                f"{r['later_cached_tokens']}/{r['later_prompt_tokens']} ({share:.0%}) | {len(r['errors'])} |"
            )
    return "\n".join(lines) + "\n"
