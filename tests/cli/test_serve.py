"""``coinfer serve`` as a user runs it: the real server in a child process, the official
``openai`` client, requests that arrive together."""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coinfer.cli import build_parser
from tests.cli.run import assert_user_error, coinfer
from tests.conftest import needs_llama


@needs_llama
def test_concurrent_clients_all_get_answers(smollm_path: Path) -> None:
    from openai import OpenAI

    from coinfer.serve.process import ServerProcess

    with ServerProcess("smollm2-135m", ctx=512, max_batch=2) as server:
        client = OpenAI(base_url=server.url, api_key="unused")

        def ask(i: int) -> str:
            reply = client.chat.completions.create(
                model="smollm2-135m", messages=[{"role": "user", "content": f"Say {i}."}], max_tokens=8
            )
            return reply.choices[0].message.content or ""

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(ask, range(4)))
    assert len(answers) == 4 and all(isinstance(a, str) for a in answers)


def test_the_model_flag_and_the_batch_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """--max-batch sizes both the model's per-conversation caches and the server's batches."""
    import coinfer.chat
    import coinfer.serve

    made: dict[str, object] = {}

    class Model:
        def close(self) -> None:
            made["model_closed"] = True

    class Chat:
        model = Model()

        def close(self) -> None:
            made["chat_closed"] = True

    class Server:
        url = "http://127.0.0.1:0/v1"

        def __init__(self, chat: object, *, host: str, port: int, max_batch: int) -> None:
            made["server"] = {"host": host, "port": port, "max_batch": max_batch}

        def start(self) -> None:
            raise KeyboardInterrupt  # as if stopped at once

        def stop(self) -> None:
            made["stopped"] = True

    def open_local_chat(spec: str, **options: object) -> Chat:
        made["chat"] = {"spec": spec, **options}
        return Chat()

    monkeypatch.setattr(coinfer.chat, "open_local_chat", open_local_chat)
    monkeypatch.setattr(coinfer.serve, "ChatServer", Server)
    args = build_parser().parse_args(["serve", "-m", "smollm2-135m", "--max-batch", "3", "--ctx", "1024"])
    assert isinstance(args, argparse.Namespace)
    with pytest.raises(KeyboardInterrupt):
        args.func(args)
    assert made["server"] == {"host": "127.0.0.1", "port": 8000, "max_batch": 3}
    assert made["chat"] == {
        "spec": "smollm2-135m", "n_ctx": 1024, "parallel": 3, "keep": 2, "backend": "llama.cpp",
        "n_threads": None, "device": None,
    }  # fmt: skip
    assert made["stopped"] and made["chat_closed"] and made["model_closed"]


def test_serve_without_a_model_is_one_line_and_a_hint() -> None:
    assert_user_error(coinfer("serve", timeout=60), "--model")
