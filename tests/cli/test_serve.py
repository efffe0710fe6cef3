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


def _fake_serve(monkeypatch: pytest.MonkeyPatch, *argv: str) -> dict[str, object]:
    """``coinfer serve ARGV`` with the model loading and the server faked: what reached them."""
    import coinfer.chat
    import coinfer.serve

    made: dict[str, object] = {"chats": [], "captured": []}

    class Model:
        name = "m"

        def close(self) -> None:
            made["model_closed"] = True

        def capture_shapes(self, batches: object, spans: object) -> int:  # a model on static caches
            made["captured"].append(list(batches))  # type: ignore[attr-defined, call-overload]
            return 0

    class Chat:
        model, name, max_concurrent = Model(), "m", 3

        def close(self) -> None:
            made["chat_closed"] = True

    class Server:
        url = "http://127.0.0.1:0/v1"

        def __init__(self, served: dict[str, object], *, host: str, port: int, api_key: str | None) -> None:
            self.served = served
            made["server"] = {"host": host, "port": port, "api_key": api_key, "served": served}

        def start(self) -> None:
            raise KeyboardInterrupt  # as if stopped at once

        def stop(self, drain_s: float = 0.0, *, hurry: object = None) -> None:
            made["stopped"], made["drain_s"] = True, drain_s
            for served in self.served.values():  # as the real server does
                served.close()  # type: ignore[attr-defined]

    def open_local_chat(spec: str, **options: object) -> Chat:
        made["chats"].append({"spec": spec, **options})  # type: ignore[attr-defined]
        return Chat()

    monkeypatch.setattr(coinfer.chat, "open_local_chat", open_local_chat)
    monkeypatch.setattr(coinfer.serve, "Server", Server)
    args = build_parser().parse_args(["serve", *argv])
    assert isinstance(args, argparse.Namespace)
    with pytest.raises(KeyboardInterrupt):
        args.func(args)
    return made


def test_the_model_flag_and_the_batch_reach_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """--max-batch sizes both the model's per-conversation caches and the server's batches;
    --admission reaches the chat."""
    monkeypatch.setenv("COINFER_API_KEY", "k")
    made = _fake_serve(
        monkeypatch, "-m", "smollm2-135m", "--max-batch", "3", "--ctx", "1024", "--max-queue", "5",
        "--admission", "arrival",
    )  # fmt: skip
    server = made["server"]
    assert isinstance(server, dict) and (server["host"], server["port"], server["api_key"]) == (
        "127.0.0.1",
        8000,
        "k",
    )
    (served,) = server["served"].values()
    assert served.name == "smollm2-135m" and served.engine == "plain" and served.max_queue == 5
    assert made["chats"] == [{
        "spec": "smollm2-135m", "n_ctx": 1024, "parallel": 3, "keep": 2, "prefill_chunk": 512,
        "store_bytes": 2 << 30, "admission": "arrival", "backend": "llama.cpp", "n_threads": None,
        "device": None, "dtype": None,
    }]  # fmt: skip
    assert made["stopped"] and made["model_closed"]  # the model the CLI loaded, closed by it
    assert made["captured"] == [[1, 2, 3]]  # on a GPU, every batch's shapes before the first request


def test_a_config_file_serves_several_models_by_name(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text(
        '[[model]]\nname = "small"\nmodel = "smollm2-135m"\nmax_batch = 2\n\n'
        '[[model]]\nname = "big"\nmodel = "qwen2.5-coder-0.5b"\nctx = 2048\n'
    )
    made = _fake_serve(monkeypatch, "--config", str(config))
    assert list(made["server"]["served"]) == ["small", "big"]  # type: ignore[index]
    assert [(c["spec"], c["parallel"], c["n_ctx"]) for c in made["chats"]] == [  # type: ignore[attr-defined]
        ("smollm2-135m", 2, 8192), ("qwen2.5-coder-0.5b", 8, 2048),
    ]  # fmt: skip


def test_a_bad_config_file_is_one_line_and_a_hint(tmp_path: Path) -> None:
    config = tmp_path / "serve.toml"
    config.write_text('[[model]]\nmodel = "smollm2-135m"\nspeed = "fast"\n')
    assert_user_error(coinfer("serve", "--config", str(config), timeout=60), "speed")
    assert_user_error(
        coinfer("serve", "-m", "smollm2-135m", "--engine", "jupiter", "--devices", "0", timeout=60),
        "--devices",
    )
    assert_user_error(coinfer("serve", "-m", "smollm2-135m", "--engine", "dragon", timeout=60), "--corpus")
    floor = coinfer("serve", "-m", "smollm2-135m", "--engine", "collective", "--batch-floor", "2", timeout=60)
    assert_user_error(floor, "--batch-floor")
    assert_user_error(coinfer("serve", "-m", "smollm2-135m", "--cache-ram", "-1", timeout=60), "--cache-ram")


def test_serve_without_a_model_is_one_line_and_a_hint() -> None:
    assert_user_error(coinfer("serve", timeout=60), "--model")


@needs_llama
def test_curl_streams_the_answer_the_official_client_gets(smollm_path: Path) -> None:
    import json
    import os
    import shutil
    import subprocess

    from openai import OpenAI

    from coinfer.serve.process import ServerProcess

    if shutil.which("curl") is None:
        if os.environ.get("CI"):
            pytest.fail("curl is missing")
        pytest.skip("needs curl")
    ask = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "Name a colour."}],
           "max_tokens": 12, "temperature": 0}  # fmt: skip
    with ServerProcess("smollm2-135m", ctx=512, max_batch=2, extra_args=["--api-key", "k1"]) as server:
        said = OpenAI(base_url=server.url, api_key="k1").chat.completions.create(**ask)  # type: ignore[call-overload]
        curl = ["curl", "-sN", "-H", "Authorization: Bearer k1", "-H", "Content-Type: application/json"]
        body = json.dumps({**ask, "stream": True})
        out = subprocess.run([*curl, "-d", body, server.url + "/chat/completions"],
                             capture_output=True, text=True, timeout=60).stdout  # fmt: skip
        status = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", server.url + "/models"]
        denied = subprocess.run(status, capture_output=True, text=True, timeout=60).stdout
    events = [line.removeprefix("data: ") for line in out.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == said.choices[0].message.content and text
    assert denied == "401"
