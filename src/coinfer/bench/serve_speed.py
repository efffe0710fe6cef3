"""Serving speed as a client sees it: the speculative suite streamed, one request at a time,
by the official ``openai`` client from ``coinfer serve --engine plain``, ``coinfer serve
--engine speculative`` and llama.cpp's own ``llama-server`` (plain and its n-gram modes,
where it is built: ``coinfer bench speculative --build-peers``), all running side by side
and taking each prompt in turn.

A request's decode rate is its completion tokens after the first over the time from its
first streamed token to its last, as the client saw them; each system's ratio to coinfer's
plain serving is taken per prompt, then their geometric mean and minimum.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from coinfer.bench.serve_load import Stream
from coinfer.errors import ConfigError

__all__ = ["SpeedConfig", "run_speed"]

SERVER_MODES: dict[str, list[str]] = {
    "llama-server-plain": [],
    "llama-server-ngram-simple": ["--spec-type", "ngram-simple"],
    "llama-server-ngram-mod": ["--spec-type", "ngram-mod"],
}


@dataclass(frozen=True)
class SpeedConfig:
    model: str = "qwen2.5-coder-1.5b"
    max_tokens: int = 192
    per_category: int = 4
    peers: tuple[str, ...] = tuple(SERVER_MODES)

    def __post_init__(self) -> None:
        if self.max_tokens < 2 or self.per_category < 1:
            raise ConfigError("max_tokens must be >= 2 and per_category >= 1")
        unknown = set(self.peers) - set(SERVER_MODES)
        if unknown:
            raise ConfigError(
                f"unknown peers {sorted(unknown)}", hint=f"choose among {', '.join(SERVER_MODES)}"
            )


def stream_once(client: Any, model: str, messages: list[dict[str, Any]], max_tokens: int) -> Stream:
    """One greedy streamed request by ``client`` (an ``openai.OpenAI``), timed at the client."""
    a, t0 = Stream(0), time.perf_counter()
    chunks = client.chat.completions.create(  # type: ignore[call-overload]
        model=model, messages=messages, temperature=0, max_tokens=max_tokens, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    for c in chunks:
        if c.usage is not None:
            a.tokens = c.usage.completion_tokens
        if c.choices and c.choices[0].delta.content:
            now = time.perf_counter() - t0
            a.first_s = now if a.first_s is None else a.first_s
            a.last_s = now
            a.text += c.choices[0].delta.content
    return a


@dataclass
class _Systems:
    """The servers running, a client of each, and how to stop them."""

    clients: dict[str, Any] = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)

    def add(self, name: str, url: str, stop: Callable[[], None]) -> None:
        import openai

        self.closers.append(stop)
        self.clients[name] = openai.OpenAI(base_url=url, api_key="bench", max_retries=0, timeout=900)
        self.closers.append(self.clients[name].close)

    def close(self) -> None:
        for close in reversed(self.closers):
            close()


def _start(config: SpeedConfig) -> _Systems:
    from coinfer import catalog
    from coinfer.bench.peers import launch_llama_server, llama_server_binary
    from coinfer.serve.process import ServerProcess

    systems = _Systems()
    try:
        for engine in ("plain", "speculative"):
            extra = ["--engine", engine, "--draft", "auto", "--keep", "0"]
            server = ServerProcess(config.model, ctx=4096, max_batch=1, extra_args=extra).start()
            systems.add(f"coinfer-{engine}", server.url, server.stop)
        binary = llama_server_binary() if config.peers else None
        for peer in config.peers if binary is not None else ():
            assert binary is not None
            proc, base = launch_llama_server(
                binary, str(catalog.prepare(config.model)), SERVER_MODES[peer], None
            )
            systems.add(peer, base + "/v1", proc.terminate)
    except BaseException:
        systems.close()
        raise
    return systems


def _geomean(values: list[float]) -> float:
    values = [v for v in values if v > 0]
    return round(math.exp(sum(math.log(v) for v in values) / len(values)), 3) if values else 0.0


def run_speed(config: SpeedConfig, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Every prompt of the suite through every system in turn; the rows and the summary."""
    from coinfer.bench.workloads import build_suite

    prompts = build_suite(config.per_category)
    systems = _start(config)
    rows: list[dict[str, Any]] = []
    try:
        for p in prompts:
            row: dict[str, Any] = {"id": p["id"], "category": p["category"]}
            for name, client in systems.clients.items():
                a = stream_once(client, config.model, p["messages"], config.max_tokens)
                row[name] = {"decode_tok_s": round(a.decode_tok_s, 2), "tokens": a.tokens, "text": a.text}
                log(f"{p['id'][:28]:28} {name:26} {a.decode_tok_s:6.2f} tok/s")
            rows.append(row)
    finally:
        systems.close()
    return {
        "config": asdict(config),
        "systems": list(systems.clients),
        "rows": rows,
        "summary": summarize(rows),
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per system: the geometric mean and the minimum of its per-prompt ratio to coinfer's
    plain serving, and how many texts equal plain serving's."""
    names = [k for k in rows[0] if k not in ("id", "category")] if rows else []
    out: dict[str, Any] = {}
    for name in names:
        ratios = [
            r[name]["decode_tok_s"] / r["coinfer-plain"]["decode_tok_s"]
            for r in rows
            if r["coinfer-plain"]["decode_tok_s"] > 0
        ]
        out[name] = {
            "geomean_vs_plain": _geomean(ratios),
            "min_vs_plain": round(min(ratios), 3) if ratios else 0.0,
            "identical_to_plain": sum(r[name]["text"] == r["coinfer-plain"]["text"] for r in rows),
            "prompts": len(rows),
        }
    return out
