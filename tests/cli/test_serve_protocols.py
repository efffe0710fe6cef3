"""``coinfer serve --engine minions|dragon`` as a user runs them: the server in a child
process, the official ``openai`` client, a real HTTP remote (a scripted cloud model) for
Minions and a real ``coinfer rag cloud`` process for DRAGON."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coinfer.serve import ChatServer
from coinfer.serve.process import ServerProcess
from coinfer.testing import ScriptedChat
from tests.cli.test_minions import DOC, remote_brain
from tests.conftest import needs_llama, needs_torch

openai = pytest.importorskip("openai")
pytestmark = needs_llama
TOKEN = {"COINFER_LINK_TOKEN": "serve-test-token"}


@pytest.fixture
def remote() -> Iterator[ChatServer]:
    with ChatServer(ScriptedChat(remote_brain, name="cloud-model")) as server:
        yield server


def test_minions_served_reads_the_requests_documents_locally_and_bills_the_remote(
    remote: ChatServer, smollm_path: Path
) -> None:
    flags = [
        "--engine",
        "minions",
        "--remote",
        "cloud-model",
        "--remote-base-url",
        remote.url,
        "--ctx",
        "4096",
    ]
    with ServerProcess("smollm2-135m", extra_args=flags) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused")
        ask = [{"role": "user", "content": "What is the default port?"}]
        r = client.chat.completions.create(
            model="smollm2-135m",
            messages=ask,
            extra_body={"documents": [{"name": "service.md", "text": DOC}]},
        )
        assert r.choices[0].message.content in ("8080", "unknown")  # what the tiny local model found
        record = r.model_extra["coinfer"]
        assert record["engine"] == "minions" and record["extras"]["protocol"] == "minions"
        remote_usage = record["extras"]["usage"]["remote"]
        assert r.usage.prompt_tokens == remote_usage["prompt_tokens"] > 0  # the cloud's bill
        seconds = record["extras"]["seconds"]  # where the question's time went
        assert seconds["local"] > 0 and seconds["remote"] > 0
        assert record["stats"]["by_side"]["local"]["seconds"] == seconds["local"]
        with urllib.request.urlopen(server.url.removesuffix("/v1") + record["trace"] + ".json") as answer:
            trace = json.load(answer)
        sent = [e["messages"] for s in trace["steps"] if (e := s.get("event")) and e.get("side") == "remote"]
        assert sent and json.dumps(DOC)[1:-1] not in json.dumps(sent)  # the remote never saw the document
        with pytest.raises(openai.BadRequestError, match="documents"):
            client.chat.completions.create(model="smollm2-135m", messages=ask)

        def asked(_: int) -> str | None:  # several questions at once: their local jobs share a batch
            documents = [{"name": "service.md", "text": DOC}]
            reply = client.chat.completions.create(
                model="smollm2-135m", messages=ask, extra_body={"documents": documents}
            )
            return reply.choices[0].message.content

        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(asked, range(2)))
        assert all(a in ("8080", "unknown") for a in answers)


@pytest.fixture
def cloud(tmp_path: Path, smollm_path: Path) -> Iterator[tuple[str, str]]:
    device, cloud_docs = tmp_path / "device", tmp_path / "cloud"
    device.mkdir()
    cloud_docs.mkdir()
    (device / "me.md").write_text("I am Ada from Bergen. I prefer simulation games.")
    (cloud_docs / "games.md").write_text(
        "The best-selling simulation games of 2024 were Farming Simulator 25."
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "coinfer", "rag", "cloud", "--corpus", str(cloud_docs), "-m", "smollm2-135m",
         "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, **TOKEN},
    )  # fmt: skip
    assert proc.stdout is not None
    address = proc.stdout.readline().split("listening on ")[1].split()[0]
    yield str(device), address
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def test_dragon_served_answers_from_both_sides_documents(
    cloud: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COINFER_LINK_TOKEN", TOKEN["COINFER_LINK_TOKEN"])
    flags = ["--engine", "dragon", "--corpus", cloud[0], "--cloud", cloud[1]]
    with ServerProcess("smollm2-135m", extra_args=flags) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused")
        ask = [{"role": "user", "content": "Which simulation game should I buy?"}]
        streamed = client.chat.completions.create(
            model="smollm2-135m", messages=ask, max_tokens=12, temperature=0, stream=True
        )
        text, records = "", []
        for chunk in streamed:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.model_extra.get("coinfer"):
                records.append(chunk.model_extra["coinfer"])
        extras = records[-1]["extras"]
        assert text and extras["mode"] == "dragon" and extras["cloud_documents"] == 1
        assert extras["documents"] == ["me.md@0"] and "fallback" not in extras
        assert sum(extras["accepted"].values()) + sum(extras["rejected"].values()) == 2 * 12


@needs_torch
def test_jupiter_served_keeps_its_devices_and_writes_what_generate_writes(tmp_path: Path) -> None:
    from coinfer.testing import tiny_hf_model_dir
    from tests.cli.run import coinfer

    model = str(tiny_hf_model_dir(tmp_path / "m", arch="qwen2", layers=4, seed=3))
    prompt = "the quick brown fox jumps over the lazy dog and then " * 3
    alone = coinfer("generate", prompt, "-m", model, "-b", "transformers", "--draft", "none", "--raw",
                    "-n", "16", "--json")  # fmt: skip
    assert alone.returncode == 0, alone.stderr
    with ServerProcess(model, extra_args=["--engine", "jupiter", "--devices", "2"]) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused")
        for _ in range(2):  # the same devices answer every request
            r = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0)
            assert r.choices[0].text == json.loads(alone.stdout)["text"]
            devices = r.model_extra["coinfer"]["extras"]["devices"]
            assert r.model_extra["coinfer"]["engine"] == "jupiter" and len(devices) == 2


def _children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux's /proc)."""
    tasks = Path(f"/proc/{pid}/task")
    return [int(c) for t in tasks.iterdir() for c in (t / "children").read_text().split()]


@needs_torch
def test_a_jupiter_device_that_dies_is_named_and_the_server_taken_out_of_service(tmp_path: Path) -> None:
    """``coinfer serve --engine jupiter --memory``: the devices planned under their
    budgets; a worker killed between requests is named in the next answer (503), its
    peer is stopped, and ``/health`` answers 503 for a load balancer."""
    from coinfer.testing import tiny_hf_model_dir

    model = str(tiny_hf_model_dir(tmp_path / "m", arch="qwen2", layers=4, seed=3))
    flags = ["--engine", "jupiter", "--devices", "3", "--memory", "4G"]
    with ServerProcess(model, extra_args=flags) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        r = client.completions.create(model=model, prompt="the quick brown fox", max_tokens=8, temperature=0)
        assert r.choices[0].text and len(r.model_extra["coinfer"]["extras"]["devices"]) == 3
        workers = _children(server.pid)
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        named = rf"device 1 \(pid {workers[0]}\) was killed by signal 9"
        with pytest.raises(openai.InternalServerError, match=named):
            client.completions.create(model=model, prompt="the quick brown fox", max_tokens=8, temperature=0)
        health = urllib.request.Request(server.url.removesuffix("/v1") + "/health")
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(health, timeout=20)
        assert caught.value.code == 503
        assert f"pid {workers[0]}" in json.loads(caught.value.read())["lost"][model]
        for _ in range(200):  # the guard's next look stops the other worker (a bound, not a timing)
            if not os.path.exists(f"/proc/{workers[1]}"):
                break
            time.sleep(0.1)
        assert not os.path.exists(f"/proc/{workers[1]}")
