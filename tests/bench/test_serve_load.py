"""The load test: 64 concurrent streaming clients of the official client against ``coinfer
serve`` on SmolLM2, a third of which go away mid-stream, a bounded number of requests and
time. (It holds every check the 32-client storm of ``coinfer bench serve --part load``
makes: honest 429s only, every finished stream identical to the request alone, memory
back within 10%; that storm is not run again here.) Each prompt is its function's first
lines: the test's time was most of it reading prompts, twice (the storm, then alone)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import needs_llama

pytest.importorskip("openai")


@needs_llama
def test_64_clients_a_third_of_which_leave_mid_stream_lose_nothing(smollm_path: Path) -> None:
    from coinfer.bench.serve_load import LoadConfig, leaving, run_load

    config = LoadConfig(
        clients=64, requests=64, max_tokens=24, max_queue=40, deadline_s=600, disconnect=1 / 3,
        prompt_chars=160,
    )  # fmt: skip
    assert len(leaving(config)) == 21
    result = run_load(config)
    assert result.errors == []  # only honest 429s, and the clients came back
    assert result.rate_limited > 0 and result.left == 21
    assert result.complete == 64 - 21 and result.different == []  # every finished stream as alone
    assert result.live_end == result.live_start  # every left request's cache freed
    assert result.rss_end_mb <= 1.10 * result.rss_start_mb and result.passed


def test_prompts_cut_short_are_each_functions_first_whole_lines() -> None:
    from coinfer.bench.serve_load import load_prompts

    whole, cut = load_prompts(64), load_prompts(64, 160)
    assert len(set(cut)) == 64  # still one request per function
    for w, c in zip(whole, cut, strict=True):
        body = c.removesuffix("```")
        assert w.startswith(body) and body.endswith("\n") and len(c) <= len(w)


_SSE = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
    b'[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
    b'data: {"id":"c","object":"chat.completion.chunk","created":0,"model":"m","choices":'
    b'[{"index":0,"delta":{},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}\n\n'
    b"data: [DONE]\n\n"
)
_OK = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"


async def _stream_from(closes: int, *, answers: bool = True, timeout: float = 30) -> tuple[Any, int]:
    """``stream_chat`` by the official client against a loopback HTTP server that reads each
    request and closes the first ``closes`` connections without a byte of response (as
    llama-server shuts a kept-alive connection the client just took), then answers with a
    stream (or, ``answers`` False, never answers); the stream and the requests it read."""
    read = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal read
        head = await reader.readuntil(b"\r\n\r\n")
        match = re.search(rb"content-length: (\d+)", head, re.I)
        await reader.readexactly(int(match.group(1)) if match else 0)
        read += 1
        if read <= closes:
            writer.close()
        elif answers:
            writer.write(_OK + _SSE)
            await writer.drain()
            writer.close()
        else:
            await asyncio.sleep(timeout + 5)

    import openai

    from coinfer.bench.serve_load import stream_chat

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
    client = openai.AsyncOpenAI(base_url=url, api_key="k", max_retries=0, timeout=timeout)
    messages = [{"role": "user", "content": "hi"}]
    try:
        return await stream_chat(client, "m", messages, 4, 0, time.monotonic() + 60), read
    finally:
        await client.close()
        server.close()


def test_a_connection_closed_unanswered_is_sent_again_and_counted() -> None:
    stream, read = asyncio.run(_stream_from(1))
    assert stream.error is None and stream.text == "hi" and stream.finish == "stop"
    assert stream.resent == 1 and read == 2  # the server read it twice and answered the second


def test_a_server_that_keeps_closing_unanswered_is_an_error_after_the_resends() -> None:
    from coinfer.bench.serve_load import RESENDS

    stream, read = asyncio.run(_stream_from(RESENDS + 1))
    assert stream.resent == RESENDS and read == RESENDS + 1
    assert stream.error.startswith("APIConnectionError") and stream.text == ""


def test_a_timeout_is_an_error_not_sent_again() -> None:
    stream, read = asyncio.run(_stream_from(0, answers=False, timeout=0.5))  # it may be working on it
    assert stream.error.startswith("APITimeoutError") and stream.resent == 0 and read == 1


def test_a_load_run_with_a_resent_request_does_not_pass() -> None:
    from coinfer.bench.serve_load import LoadResult

    clean = LoadResult({}, streams=2, complete=2, rss_start_mb=100, rss_end_mb=100)
    assert clean.passed
    clean.resent = 1  # coinfer's server must never close a connection unanswered
    assert not clean.passed
