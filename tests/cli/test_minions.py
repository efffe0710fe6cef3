"""``coinfer minions`` as a user runs it: a real subprocess, a real HTTP remote, bad input."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from coinfer.chat import ChatRequest
from coinfer.engines.minions.job_api import chunk_by_paragraphs
from coinfer.serve import ChatServer
from coinfer.testing import ScriptedChat
from tests.cli.run import assert_user_error, coinfer
from tests.conftest import needs_llama

DOC = "\n\n".join(
    ["The service section.", "The default port is 8080 unless PORT is set.", "Logs go to stderr."] * 4
)
CODE = """```python
def prepare_jobs(documents, last_jobs, last_outputs):
    return [JobManifest(chunk=c, task="What is the default port?", doc=d.name)
            for d in documents for c in chunk_by_paragraphs(d.text, max_chars=200)]
```"""


def remote_brain(request: ChatRequest) -> str:
    """A remote that writes job code, then answers from what the local model found."""
    prompt = request.messages[-1]["content"]
    if "def prepare_jobs" in prompt:
        return CODE
    if 'Document "' in prompt:  # remote-only: it sees the whole document
        return "8080"
    if "8080" in prompt:
        return json.dumps({"decision": "final", "answer": "8080"})
    return json.dumps({"decision": "final", "answer": "unknown"})


@pytest.fixture
def remote() -> Iterator[ChatServer]:
    with ChatServer(ScriptedChat(remote_brain, name="cloud-model")) as server:
        yield server


@pytest.fixture
def doc(tmp_path: Path) -> Path:
    path = tmp_path / "service.md"
    path.write_text(DOC)
    return path


def test_remote_only_through_a_real_http_remote_reports_usage_and_dollars(
    remote: ChatServer, doc: Path
) -> None:
    proc = coinfer(
        "minions", "--doc", str(doc), "-q", "What is the default port?", "--protocol", "remote-only",
        "--remote", "cloud-model", "--remote-base-url", remote.url, "--price-as", "gpt-4o", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["answer"] == "8080" and out["protocol"] == "remote-only" and out["rounds"] == 1
    usage = out["usage"]["remote"]
    assert usage["prompt_tokens"] >= len(DOC.split()) and usage["calls"] == 1
    assert out["cost_usd"] == pytest.approx(
        usage["prompt_tokens"] * 2.5e-6 + usage["completion_tokens"] * 1e-5
    )
    assert out["usage"]["local"]["calls"] == 0
    assert out["seconds"]["remote"] > 0 and out["seconds"]["local"] == 0  # where the time went


@needs_llama
def test_minions_runs_local_jobs_and_the_remote_never_sees_the_document(
    remote: ChatServer, doc: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.json"
    proc = coinfer(
        "minions", "--doc", str(doc), "-q", "What is the default port?", "--remote", "cloud-model",
        "--remote-base-url", remote.url, "--local", "smollm2-135m", "--local-ctx", "4096",
        "--trace", str(trace),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] in ("8080", "unknown")  # whatever the tiny local model found
    jobs = len(chunk_by_paragraphs(DOC, max_chars=200))
    assert f"round 1  local  jobs: {jobs} request(s)" in proc.stderr  # all in one concurrent batch
    assert "priced as gpt-4o" in proc.stderr
    recorded = json.loads(trace.read_text())
    events = [step["event"] for step in recorded["steps"] if "event" in step]
    assert events == recorded["extras"]["trace"] and recorded["format"] == "coinfer-trace"
    remote_text = json.dumps([e["messages"] for e in events if e.get("side") == "remote"])
    assert json.dumps(DOC)[1:-1] not in remote_text
    assert recorded["cost"]["priced_as"] == "gpt-4o" and recorded["cost"]["remote_by_round"]


def test_a_remote_that_is_down_fails_clearly_and_quickly(doc: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    proc = coinfer(
        "minions", "--doc", str(doc), "-q", "port?", "--protocol", "remote-only",
        "--remote-base-url", f"http://127.0.0.1:{port}/v1",
    )  # fmt: skip
    assert_user_error(proc, "could not reach the remote model")
    assert time.monotonic() - started < 60


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"", "is empty"),
        (b"   \n\n", "is empty"),
        (b"\x7fELF\x00\x00binary", "looks binary"),
        (b"\xff\xfe\xfa", "UTF-8"),
    ],
)
def test_bad_documents_are_one_line_errors(tmp_path: Path, content: bytes, needle: str) -> None:
    path = tmp_path / "doc.bin"
    path.write_bytes(content)
    assert_user_error(coinfer("minions", "--doc", str(path), "-q", "anything"), needle)


def test_a_missing_document_and_an_empty_question_are_one_line_errors(tmp_path: Path, doc: Path) -> None:
    assert_user_error(coinfer("minions", "--doc", str(tmp_path / "nope.txt"), "-q", "x"), "no document at")
    assert_user_error(coinfer("minions", "--doc", str(doc), "-q", "  "), "the question is empty")


@needs_llama
def test_work_the_local_window_cannot_hold_is_refused_before_the_remote_is_paid(
    tmp_path: Path, remote: ChatServer
) -> None:
    doc = tmp_path / "long.md"
    doc.write_text("\n\n".join([DOC] * 3))  # about 280 tokens, more than a 256-token window
    url = f"{remote.url}/v1"
    long_question = "Which port does the service use, " + "and why, " * 200 + "?"
    args = ("--doc", str(doc), "--remote-base-url", url, "--local-ctx", "256")
    proc = coinfer("minions", *args, "-q", long_question, "--protocol", "minions")
    assert_user_error(proc, "the question has", "--local-ctx")
    proc = coinfer("minions", *args, "-q", "Which port?", "--protocol", "minion")
    assert_user_error(proc, "the documents and question have", "--protocol minions")
    assert remote.model.requests == []  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--max-rounds", "0"], "max_rounds"),
        (["--protocol", "minion", "--max-rounds", "0"], "max_rounds"),
        (["--chunk-chars", "10"], "chunk_chars >= 200"),
        (["--protocol", "rag", "--rag-chunks", "0"], "top_k >= 1"),
        (["--trace", "/no/such/folder/trace.json"], "cannot write the trace"),
        (["--top-k", "3"], "unrecognized arguments"),
    ],
)
def test_a_bad_flag_is_one_line_and_a_hint_before_any_model_loads(
    doc: Path, flags: list[str], needle: str
) -> None:
    """The models named do not exist: the flag's error comes first, so nothing was loaded."""
    proc = coinfer(
        "minions", "--doc", str(doc), "-q", "port?", "--local", "no-such-model", "--remote", "no-such-model",
        *flags, timeout=60,
    )  # fmt: skip
    assert_user_error(proc, needle)
