"""The server under load: ``clients`` concurrent streaming clients of the official ``openai``
client against ``coinfer serve`` in its own process, a bounded number of requests and a
deadline; then each request served alone, to compare. With ``disconnect``, that share of
the requests' clients go away mid-stream, each after a random number of chunks (churn).

Checked: no error other than 429s (an honest refusal: the client waits ``Retry-After``
and sends again), no connection closed unanswered (``resent``), every stream that was not
left complete (a finish reason), every greedy text identical to the same request served
alone, the model's live sequences (cache cells in use) back to their count before the
storm, and the server's memory (its resident set) back within 10% of where it started.
The requests are HumanEval's prompts, as a user would send them.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from coinfer.errors import ConfigError

__all__ = [
    "LoadConfig",
    "LoadResult",
    "RESENDS",
    "Stream",
    "Work",
    "clients_at_once",
    "load_prompts",
    "run_load",
    "seconds_said",
    "stream_chat",
    "unanswered",
]

Work = list[tuple[list[dict[str, str]], dict[str, Any] | None]]  # (messages, extra body) per request
RESENDS = 2  # times a request whose connection closed unanswered is sent again (the client's default)


@dataclass(frozen=True)
class LoadConfig:
    model: str = "smollm2-135m"
    engine: str = "plain"
    clients: int = 32
    requests: int = 32
    max_tokens: int = 48
    max_batch: int = 8
    max_queue: int = 64
    ctx: int = 1024
    deadline_s: float = 600.0
    disconnect: float = 0.0  # the share of requests whose client goes away mid-stream
    seed: int = 0  # which requests those are, and after how many chunks
    prompt_chars: int | None = None  # each function cut to its first lines (about this long); None: whole

    def __post_init__(self) -> None:
        if self.clients < 1 or self.requests < 1 or self.max_tokens < 1 or self.deadline_s <= 0:
            raise ConfigError("clients, requests and max_tokens must be >= 1, the deadline > 0")
        if not 0.0 <= self.disconnect < 1.0:
            raise ConfigError(f"disconnect is a share below 1, got {self.disconnect}")


@dataclass
class Stream:
    """One streamed request as its client saw it: seconds from sending it to its first and
    last text, the server's count of its tokens, how it ended."""

    prompt: int
    text: str = ""
    finish: str | None = None
    error: str | None = None
    rate_limited: int = 0
    resent: int = 0  # sent again: the server closed the connection without answering (``stream_chat``)
    first_s: float | None = None
    last_s: float | None = None
    tokens: int = 0  # the server's count (the stream's usage)
    prompt_tokens: int = 0  # the server's count of its prompt
    cached_tokens: int = 0  # of them, taken from a cache (coinfer's usage; llama-server's timings.cache_n)
    sent_s: float | None = None  # when it was sent, in seconds from its level's start (``clients_at_once``)
    seconds: dict[str, float] = field(default_factory=dict)  # where the engine says its time went (MinionS)

    @property
    def inter_token_s(self) -> float | None:
        """The mean gap between its tokens after the first (None below two)."""
        if self.first_s is None or self.last_s is None or self.tokens < 2:
            return None
        return (self.last_s - self.first_s) / (self.tokens - 1)

    @property
    def decode_tok_s(self) -> float:
        """Tokens after the first over the time from the first to the last (0 if unknown)."""
        gap = self.inter_token_s
        return 1.0 / gap if gap else 0.0


@dataclass
class LoadResult:
    config: dict[str, Any]
    streams: int = 0
    complete: int = 0
    errors: list[str] = field(default_factory=list)
    rate_limited: int = 0
    resent: int = 0  # requests sent again after the server closed a connection unanswered
    identical: int = 0
    different: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    tokens: int = 0  # completion tokens of every stream
    rss_start_mb: float = 0.0
    rss_end_mb: float = 0.0
    ttft_median_s: float = 0.0
    left: int = 0  # streams whose client went away mid-stream, on purpose
    live_start: float = 0.0  # the model's live sequences before the storm
    live_end: float = 0.0  # and after it

    @property
    def passed(self) -> bool:
        memory_ok = self.rss_end_mb <= 1.10 * self.rss_start_mb and self.live_end == self.live_start
        complete = self.complete == self.streams - self.left
        return not self.errors and not self.resent and complete and not self.different and memory_ok

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def load_prompts(n: int, chars: int | None = None) -> list[str]:
    """``n`` requests: HumanEval's prompts in a chat request, each cut after the last line
    that ends within its first ``chars`` characters (a shorter prefill; None: whole)."""
    from coinfer.bench.workloads import humaneval_problems, humaneval_request

    problems = [p["prompt"] for p in humaneval_problems()]
    if chars is not None:
        problems = [p[:chars].rsplit("\n", 1)[0] + "\n" if "\n" in p[:chars] else p for p in problems]
    return [humaneval_request(problems[i % len(problems)]) for i in range(n)]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def stream_chat(
    client: Any, model: str, messages: list[dict[str, str]], max_tokens: int, index: int, deadline: float,
    *, leave_after: int | None = None, extra_body: dict[str, Any] | None = None, temperature: float = 0.0,
) -> Stream:  # fmt: skip
    """One streaming request by ``client`` (an ``openai.AsyncOpenAI``), timed at the client;
    after a 429 it waits ``Retry-After`` and sends again. A request whose connection the
    server closed without a byte of answer (a kept-alive one it shut as the client took it:
    llama-server's "Server disconnected without sending a response", 2 ms after sending)
    is sent again up to ``RESENDS`` times, as the client's own retries would
    (``max_retries``, which the bench turns off to count 429s itself), and counted
    (``resent``). A timeout, or a failure once the answer began, is an error. Greedy, or
    sampled at ``temperature`` with the seed ``index`` (so the same request sends the same seed).
    ``leave_after``: the client goes away after that many chunks of text (its ``finish``:
    ``left``); ``extra_body``: coinfer's own fields (a MinionS request's ``documents``)."""
    import openai

    s = Stream(index)
    t0 = time.perf_counter()
    while True:
        try:
            chunks = await client.chat.completions.create(
                model=model, messages=messages, temperature=temperature, max_tokens=max_tokens, stream=True,
                seed=index if temperature else openai.NOT_GIVEN, stream_options={"include_usage": True},
                extra_body=extra_body,
            )  # fmt: skip
            seen = 0
            async for c in chunks:
                if c.usage is not None:
                    s.tokens, s.prompt_tokens = c.usage.completion_tokens, c.usage.prompt_tokens
                s.cached_tokens = cached_said(c) or s.cached_tokens
                if c.choices:
                    if c.choices[0].delta.content:
                        s.last_s = time.perf_counter() - t0
                        s.first_s = s.last_s if s.first_s is None else s.first_s
                        seen += 1
                    s.text += c.choices[0].delta.content or ""
                    s.finish = c.choices[0].finish_reason or s.finish
                s.seconds = seconds_said(c) or s.seconds
                if leave_after is not None and seen >= leave_after and s.finish is None:
                    await chunks.close()  # the client goes away mid-stream
                    s.finish = "left"
                    break
            break
        except openai.RateLimitError as exc:
            s.rate_limited += 1
            wait = float(exc.response.headers.get("retry-after", "1"))
            if time.monotonic() + wait > deadline:
                s.error = "rate limited past the deadline"
                break
            await asyncio.sleep(wait)
        except openai.APIConnectionError as exc:
            if unanswered(exc) and s.first_s is None and s.resent < RESENDS and time.monotonic() < deadline:
                s.resent += 1
                continue
            s.error = f"{type(exc).__name__}: {exc}"
            break
        except openai.OpenAIError as exc:
            s.error = f"{type(exc).__name__}: {exc}"
            break
    return s


def unanswered(exc: Exception) -> bool:
    """Whether ``exc`` (an ``openai.APIConnectionError``) says the server closed the
    connection before any response: sending the request again cannot repeat work."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return False  # the server may be working on it
    cause = exc.__cause__
    return cause is not None and "without sending a response" in str(cause)


def cached_said(chunk: Any) -> int:
    """The prompt tokens a chunk says came from a cache: its usage's (OpenAI's field, which
    coinfer fills), or llama-server's own ``timings.cache_n``; 0 where it says nothing."""
    timings = (chunk.model_extra or {}).get("timings")
    if isinstance(timings, dict) and "cache_n" in timings:
        return int(timings["cache_n"])
    details = chunk.usage.prompt_tokens_details if chunk.usage is not None else None
    return int((details.cached_tokens if details is not None else 0) or 0)


def seconds_said(chunk: Any) -> dict[str, float]:
    """The seconds by side a chunk's ``coinfer`` record gives (MinionS: local, remote,
    sandbox); empty where it gives none."""
    record = (chunk.model_extra or {}).get("coinfer") or {}
    seconds = (record.get("extras") or {}).get("seconds")
    return {str(k): float(v) for k, v in seconds.items()} if isinstance(seconds, dict) else {}


async def clients_at_once(
    url: str, model: str, work: Work, order: list[int], clients: int, *, max_tokens: int, deadline_s: float,
    leave_after: Mapping[int, int] | None = None, temperature: float = 0.0,
) -> tuple[list[Stream], float]:  # fmt: skip
    """The requests ``work[i]`` for each ``i`` of ``order``, sent by ``clients`` streaming
    clients at once, each its next as soon as its last ends; the streams (``prompt`` is
    ``i``) and the seconds from the first sent to the last done. ``leave_after``: request
    ``i``'s client goes away after that many chunks; ``temperature``: each request's
    (``stream_chat``)."""
    import openai

    deadline = time.monotonic() + deadline_s
    client = openai.AsyncOpenAI(base_url=url, api_key="bench", max_retries=0, timeout=deadline_s)
    todo, out = list(order), list[Stream]()

    async def one_client() -> None:
        while todo and time.monotonic() < deadline:
            i = todo.pop(0)
            messages, extra = work[i]
            leave = (leave_after or {}).get(i)
            sent_s = time.perf_counter() - t0
            sent = stream_chat(client, model, messages, max_tokens, i, deadline, leave_after=leave,
                               extra_body=extra, temperature=temperature)  # fmt: skip
            out.append(replace(await sent, sent_s=round(sent_s, 3)))

    t0 = time.perf_counter()
    try:
        await asyncio.gather(*[one_client() for _ in range(clients)])
    finally:
        await client.close()
    return out, time.perf_counter() - t0


def leaving(config: LoadConfig) -> dict[int, int]:
    """The requests whose client goes away mid-stream: index -> after how many chunks."""
    rng = random.Random(config.seed)
    chosen = rng.sample(range(config.requests), int(config.requests * config.disconnect))
    return {i: rng.randint(1, max(1, config.max_tokens // 2)) for i in sorted(chosen)}


def live_sequences(url: str) -> float:
    """The served models' live sequences (cache cells in use), read from ``/metrics``."""
    base = url.removesuffix("/v1")
    with urllib.request.urlopen(base + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return sum(float(m) for m in re.findall(r"^coinfer_live_sequences\{[^}]*\} (\S+)$", text, re.M))


def _alone(client: Any, config: LoadConfig, prompt: str) -> str:
    r = client.chat.completions.create(
        model=config.model,
        messages=[{"role": "user", "content": prompt}],
        temperature=0,
        max_tokens=config.max_tokens,
    )
    return str(r.choices[0].message.content)


def run_load(config: LoadConfig) -> LoadResult:
    """Start the server, run the storm, then each request alone; the result."""
    import statistics

    import openai

    from coinfer.serve.process import ServerProcess

    prompts = load_prompts(config.requests, config.prompt_chars)
    # no kept or stored caches: memory and live sequences back where they were means nothing leaked
    extra = [
        "--engine",
        config.engine,
        "--max-queue",
        str(config.max_queue),
        "--keep",
        "0",
        "--cache-ram",
        "0",
    ]
    result = LoadResult(asdict(config))
    with (
        ServerProcess(config.model, ctx=config.ctx, max_batch=config.max_batch, extra_args=extra) as server,
        openai.OpenAI(base_url=server.url, api_key="load", timeout=config.deadline_s) as client,
    ):
        _alone(client, config, prompts[0])  # warm: the first request's allocations are not a leak
        result.rss_start_mb = round(_rss_mb(server.pid), 1)
        result.live_start = live_sequences(server.url)
        work: Work = [([{"role": "user", "content": p}], None) for p in prompts]
        storm = clients_at_once(server.url, config.model, work, list(range(config.requests)), config.clients,
                                max_tokens=config.max_tokens, deadline_s=config.deadline_s,
                                leave_after=leaving(config))  # fmt: skip
        streams, wall_s = asyncio.run(storm)
        result.wall_s = round(wall_s, 2)
        time.sleep(1.0)
        result.rss_end_mb = round(_rss_mb(server.pid), 1)
        result.live_end = live_sequences(server.url)
        finished = [s for s in streams if s.finish != "left"]
        alone = {i: _alone(client, config, prompts[i]) for i in sorted({s.prompt for s in finished})}
    result.streams = config.requests
    result.left = sum(s.finish == "left" for s in streams)
    result.errors = [f"request {s.prompt}: {s.error}" for s in streams if s.error]
    result.errors += [
        f"request {i}: never sent" for i in sorted(set(range(config.requests)) - {s.prompt for s in streams})
    ]
    result.rate_limited = sum(s.rate_limited for s in streams)
    result.resent = sum(s.resent for s in streams)
    result.complete = sum(s.finish in ("stop", "length") and s.error is None for s in finished)
    result.different = sorted(s.prompt for s in finished if s.error is None and s.text != alone[s.prompt])
    result.identical = sum(s.error is None and s.text == alone[s.prompt] for s in finished)
    result.tokens = sum(s.tokens for s in finished)
    firsts = [s.first_s for s in streams if s.first_s is not None]
    result.ttft_median_s = round(statistics.median(firsts), 3) if firsts else 0.0
    return result
