"""``coinfer rag cloud`` and ``coinfer rag ask`` as a user runs them: two real processes
on loopback, SmolLM2 on both sides, each with its own corpus."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from coinfer.cli.rag import READY_PREFIX
from tests.cli.run import assert_user_error, coinfer
from tests.conftest import HAS_LLAMA, HAS_TORCH

pytestmark = pytest.mark.skipif(
    not (HAS_LLAMA and HAS_TORCH) or __import__("importlib").util.find_spec("grpc") is None,
    reason="needs the llama, torch, rag and net extras",
)
TOKEN = {"COINFER_LINK_TOKEN": "a-shared-secret"}
QUESTION = "Which simulation game should I buy?"


def _corpus(folder: Path, files: dict[str, str]) -> str:
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return str(folder)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    root = tmp_path_factory.mktemp("rag")
    device = _corpus(root / "device", {"me.md": "I am Ada from Bergen. I prefer simulation games."})
    cloud = _corpus(
        root / "cloud",
        {
            "games.md": "The best-selling simulation games of 2024 were Farming Simulator 25 and The Sims 4.",
            "weather.md": "Bergen is one of the rainiest cities in Europe.",
        },
    )
    return device, cloud


@contextmanager
def _cloud_process(corpus: str) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``coinfer rag cloud`` on ``corpus``, on a free loopback port; stopped after."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coinfer",
            "rag",
            "cloud",
            "--corpus",
            corpus,
            "-m",
            "smollm2-135m",
            "--listen",
            "127.0.0.1:0",
            "--max-batch",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, **TOKEN},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith(READY_PREFIX), line
    address = line.removeprefix(READY_PREFIX).split()[0]
    yield proc, address
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def cloud(corpora: tuple[str, str], smollm_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """One cloud for the tests that leave it serving (each cloud is a process to start)."""
    with _cloud_process(corpora[1]) as served:
        yield served


@pytest.fixture
def own_cloud(corpora: tuple[str, str], smollm_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """A cloud of the test's own, for a test that kills it."""
    with _cloud_process(corpora[1]) as served:
        yield served


def _ask(device: str, *extra: str, env: dict[str, str] = TOKEN) -> subprocess.CompletedProcess[str]:
    return coinfer("rag", "ask", "--corpus", device, "-m", "smollm2-135m", *extra, QUESTION, env=env)


def test_ask_answers_from_both_corpora(
    corpora: tuple[str, str], cloud: tuple[subprocess.Popen[str], str], tmp_path: Path
) -> None:
    import json

    trace_file = tmp_path / "run.json"
    proc = _ask(corpora[0], "--cloud", cloud[1], "--max-tokens", "16", "--json", "--trace", str(trace_file))
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["mode"] == "dragon" and report["cloud_documents"] == 2 and "fallback" not in report
    assert 0 < report["tokens"] <= 16 and report["text"]  # within its budget (it may end sooner)
    assert report["documents"] == ["me.md@0"]  # only the device's own; the cloud's never came
    trace = json.loads(trace_file.read_text())  # each token with the verdict on each side's draft
    assert trace["engine"] == "dragon" and trace["text"] == report["text"]
    for side in ("device", "cloud"):
        verdicts = [step["sides"][side] for step in trace["steps"]]
        assert verdicts.count(True) == report["accepted"][side]
        assert verdicts.count(False) == report["rejected"][side]


def test_a_cloud_answers_two_devices_at_once(
    corpora: tuple[str, str], cloud: tuple[subprocess.Popen[str], str]
) -> None:
    """Two devices ask at once; the cloud (--max-batch 2) answers both streams together
    (neither waits for the other's answer to end, nor falls back to its own documents).
    That the text is each one's alone is tests/engines/dragon/test_pipeline.py's: here
    llama.cpp's rounding of a batch's shape may flip a near tie."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    flags = ("--cloud", cloud[1], "--max-tokens", "12", "--json")
    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(lambda _: _ask(corpora[0], *flags), range(2)))
    for proc in procs:
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["mode"] == "dragon" and "fallback" not in report and report["cloud_documents"] == 2
        assert 0 < report["tokens"] <= 12


def test_ask_without_a_cloud_is_device_only_rag(corpora: tuple[str, str], smollm_path: Path) -> None:
    proc = _ask(corpora[0], "--max-tokens", "8")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and "device-only: 1 device documents" in proc.stderr


def test_a_wrong_token_is_refused_and_the_cloud_serves_on(
    corpora: tuple[str, str], cloud: tuple[subprocess.Popen[str], str]
) -> None:
    wrong = _ask(corpora[0], "--cloud", cloud[1], "--max-tokens", "4", env={"COINFER_LINK_TOKEN": "guess"})
    assert_user_error(wrong, "refused this device's token", "COINFER_LINK_TOKEN")
    right = _ask(corpora[0], "--cloud", cloud[1], "--max-tokens", "4")
    assert right.returncode == 0 and "dragon:" in right.stderr, right.stderr


def test_no_token_is_a_user_error(corpora: tuple[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "COINFER_LINK_TOKEN"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "coinfer",
            "rag",
            "ask",
            "--corpus",
            corpora[0],
            "--cloud",
            "127.0.0.1:9",
            "q",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert_user_error(proc, "COINFER_LINK_TOKEN")


def test_the_cloud_killed_mid_answer_leaves_the_device_to_finish(
    corpora: tuple[str, str], own_cloud: tuple[subprocess.Popen[str], str]
) -> None:
    cloud = own_cloud
    ask = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coinfer",
            "rag",
            "ask",
            "--corpus",
            corpora[0],
            "-m",
            "smollm2-135m",
            "--cloud",
            cloud[1],
            "--max-tokens",
            "400",
            "-t",
            "0.8",
            "--seed",
            "5",
            QUESTION,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **TOKEN},
    )
    assert ask.stdout is not None
    first = ask.stdout.read(10)  # the answer is streaming
    cloud[0].kill()
    rest, err = ask.communicate(timeout=120)
    assert ask.returncode == 0, err
    assert "Traceback" not in err
    assert "finished on the device alone" in err and "dragon:" in err
    assert len(first + rest) > 10
