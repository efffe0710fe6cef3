"""``coinfer generate`` as a user runs it: a real subprocess, real models."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.run import assert_user_error, coinfer
from tests.conftest import needs_llama, needs_torch, same_up_to_a_near_tie


@needs_llama
def test_generate_json_on_llama_cpp(smollm_path: Path) -> None:
    proc = coinfer("generate", "Name three colours.", "-m", "smollm2-135m", "-n", "12", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["text"].strip() and 1 <= out["n_tokens"] <= 12
    assert out["stats"]["tokens_per_s"] > 0 and out["stats"]["ttft_s"] > 0
    assert out["finish_reason"] in {"stop", "length"}


@needs_llama
def test_generate_streams_text_then_a_summary_line(smollm_path: Path) -> None:
    proc = coinfer("generate", "Count from one to five.", "-m", "smollm2-135m", "-n", "16", "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    summary = proc.stderr.strip().splitlines()[-1]
    assert "tokens" in summary and "tok/s" in summary and "ttft" in summary


@needs_llama
def test_greedy_generate_is_the_same_text_twice_and_raw_differs(smollm_path: Path) -> None:
    args = ("generate", "The capital of France is", "-m", "smollm2-135m", "-n", "8", "--json")
    first, second = json.loads(coinfer(*args).stdout), json.loads(coinfer(*args).stdout)
    assert first["text"] == second["text"]
    raw = json.loads(coinfer(*args, "--raw").stdout)
    assert raw["stats"]["prompt_tokens"] < first["stats"]["prompt_tokens"]  # no chat template around it


@needs_torch
def test_generate_on_transformers_with_a_model_directory(tiny_dirs: dict[str, Path]) -> None:
    proc = coinfer(
        "generate", "def add(a, b):", "-m", str(tiny_dirs["qwen2"]), "-b", "transformers", "-n", "5", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["backend"] == "transformers" and out["n_tokens"] >= 1


def test_unknown_model_lists_the_names() -> None:
    proc = coinfer("generate", "hi", "-m", "no-such-model")
    assert_user_error(proc, "unknown model", "smollm2-135m", "qwen2.5-coder-1.5b")


@needs_llama
def test_prompt_longer_than_the_context_says_the_lengths(smollm_path: Path) -> None:
    proc = coinfer("generate", "word " * 200, "-m", "smollm2-135m", "--ctx", "64", "--raw")
    assert_user_error(proc, "context window holds 64")
    assert re.search(r"the prompt has 2\d\d tokens", proc.stderr), proc.stderr


@needs_llama
def test_a_gguf_file_cut_short_is_one_line_before_llama_cpp_sees_it(tmp_path: Path) -> None:
    from tests.models.gguf_files import write_tiny_gguf

    cut = tmp_path / "cut.gguf"
    cut.write_bytes(write_tiny_gguf(tmp_path / "whole.gguf")[:100])
    proc = coinfer("generate", "hi", "-m", str(cut))
    assert_user_error(proc, "not a readable GGUF file", "download it again")


@needs_llama
def test_a_damaged_model_file_is_refused(tmp_path: Path, smollm_path: Path) -> None:
    env = {"COINFER_CACHE": str(tmp_path)}
    assert coinfer("models", "prepare", "smollm2-135m", env=env).returncode == 0
    gguf = tmp_path / "models" / smollm_path.name
    with gguf.open("ab") as f:
        f.write(b"\0")
    proc = coinfer("generate", "hi", "-m", "smollm2-135m", "-n", "2", env=env)
    assert_user_error(proc, "sha256", "coinfer models prepare smollm2-135m --force")
    assert coinfer("models", "prepare", "smollm2-135m", "--force", env=env).returncode == 0
    assert coinfer("generate", "hi", "-m", "smollm2-135m", "-n", "2", env=env).returncode == 0


@needs_llama
def test_ctrl_c_keeps_what_was_generated(smollm_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "coinfer",
            "generate",
            "Write a long story about a lighthouse.",
            "-m",
            "smollm2-135m",
            "-n",
            "4000",
            "--ctx",
            "4096",
            "-t",
            "0.8",
            "--seed",
            "3",
            "--draft",
            "none",  # seeded sampling is then the same story every run (a long one)
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a terminal's foreground job: a suite started in the background (`make test &`)
        # ignores SIGINT, and a child would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None
    first = proc.stdout.read(20)  # wait until text is streaming
    time.sleep(0.5)
    status = Path(f"/proc/{proc.pid}/status").read_text() if proc.poll() is None else "exited"
    signals = [line for line in status.splitlines() if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
    proc.send_signal(signal.SIGINT)
    try:
        rest, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert proc.returncode == 130, f"{err}\nthe child's signals when interrupted: {signals}"
    assert len(first + rest) >= 20
    assert "Traceback" not in err
    assert "interrupted" in err.strip().splitlines()[-1]


@pytest.mark.slow
@needs_torch
def test_generate_on_transformers_from_a_catalogue_gguf() -> None:
    """The real Qwen2.5-Coder-0.5B through transformers (converted once, then cached)."""
    proc = coinfer(
        "generate",
        "Write hello world in C.",
        "-m",
        "qwen2.5-coder-0.5b",
        "-b",
        "transformers",
        "-n",
        "6",
        "--json",
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["n_tokens"] >= 1 and out["text"].strip()


@needs_llama
def test_a_model_without_a_chat_template_says_so_and_sends_plain_text() -> None:
    proc = coinfer("generate", "The three primary colours are", "-m", "gemma-3-270m", "-n", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "no chat template" in proc.stderr
    out = json.loads(proc.stdout)
    assert out["prompt_format"] == "raw" and out["n_tokens"] >= 1


def _the_plain_text_or_a_near_tie(model: Any, prompt: str, got: str, plain_text: str) -> bool:
    """``got`` is plain decoding's text, or departs from the target's own greedy tokens at
    a near-tie: the draft length ``--draft auto`` picks from this machine's measured costs
    sets the verifying forward's shape, which moves llama.cpp's logits slightly (the
    README's known gap), and a loaded machine picks another length."""
    ids = model.user_prompt(prompt)
    return got == plain_text or same_up_to_a_near_tie(model, ids, model.tokenize(got))


@needs_llama
def test_generate_with_an_ngram_draft_reports_speculation_stats(smollm_llama: Any) -> None:
    code = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"
    prompt = f"Repeat this code exactly:\n{code}"
    args = ("generate", prompt, "-m", "smollm2-135m", "-n", "24", "--json")
    plain = json.loads(coinfer(*args, "--draft", "none").stdout)
    # --draft auto: prompt lookup, with k chosen from this machine's measured costs (which
    # may draft little), and the target's own text
    default = json.loads(coinfer(*args).stdout)
    assert default["draft"] == "ngram"
    assert _the_plain_text_or_a_near_tie(smollm_llama, prompt, default["text"], plain["text"])
    proc = coinfer(*args, "--draft", "ngram", "--draft-tokens", "3")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    stats = out["stats"]
    assert out["draft"] == "ngram" and stats["drafted"] >= stats["accepted"] > 0  # the answer copies code
    assert _the_plain_text_or_a_near_tie(smollm_llama, prompt, out["text"], plain["text"])
    assert stats["target_forwards"] >= 1 and stats["mean_accepted_length"] >= 1.0
    assert 0.0 <= stats["acceptance_rate"] <= 1.0
    assert out["n_tokens"] >= 1 and len(out["text"]) > 0
    assert plain["draft"] == "none" and plain["stats"]["drafted"] == 0  # plain decoding drafts nothing


@needs_llama
def test_a_trace_colours_every_token_as_the_stats_count_it_and_view_shows_it(
    smollm_path: Path, tmp_path: Path
) -> None:
    from coinfer.decoding.trace import origin_counts

    trace_file = tmp_path / "run.json"
    prompt = "Repeat exactly: a b c d e f g a b c d e f g"
    proc = coinfer("generate", prompt, "-m", "smollm2-135m", "-n", "24", "--draft", "ngram", "--json",
                   "--trace", str(trace_file))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out, trace = json.loads(proc.stdout), json.loads(trace_file.read_text())
    counts = origin_counts(trace)
    assert trace["text"] == out["text"] and trace["stats"] == out["stats"] and trace["draft"] == "ngram"
    assert counts["ngram"] == out["stats"]["accepted"] > 0
    own = counts["target"] + counts["rectified"]  # one per forward (the budget may cut the last)
    assert out["stats"]["rounds"] <= own <= out["stats"]["rounds"] + 1
    assert sum(counts.values()) == out["n_tokens"]
    rejected = [s for s in trace["steps"] if s["drafted"] > s["accepted"] and s["tokens"] > s["accepted"]]
    assert counts["rectified"] == len(rejected)  # a round with a rejected draft ends in the target's token
    view = coinfer("view", str(trace_file), "--no-open")
    assert view.returncode == 0, view.stderr
    assert f"{counts['ngram']} ngram" in view.stdout and (tmp_path / "run.html").read_text().startswith(
        "<!doctype"
    )
    assert_user_error(coinfer("view", str(tmp_path / "nothing.json"), "--no-open"), "cannot read the trace")
    assert_user_error(coinfer("generate", "hi", "--trace", "/no/such/dir/t.json"), "cannot write the trace")


@needs_llama
def test_a_draft_model_with_another_tokenizer_drafts_through_text(smollm_path: Path) -> None:
    # exact identity with plain decoding is tested on transformers (tests/decoding/test_speculative.py);
    # llama.cpp's verify batches round differently from single-token decoding (issue 3, open)
    proc = coinfer(
        "generate",
        "List three fruits.",
        "-m",
        "smollm2-135m",
        "-n",
        "16",
        "--draft",
        "gemma-3-270m",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert "drafting through text" not in proc.stderr  # --json keeps stderr quiet
    out = json.loads(proc.stdout)
    assert out["draft"] == "gemma-3-270m" and out["n_tokens"] >= 1 and out["stats"]["target_forwards"] >= 1
    noted = coinfer(
        "generate", "List three fruits.", "-m", "smollm2-135m", "-n", "4", "--draft", "gemma-3-270m"
    )
    assert noted.returncode == 0 and "drafting through text" in noted.stderr


@needs_llama
def test_collective_generate_is_the_plain_greedy_text_with_each_drafts_acceptance(smollm_path: Path) -> None:
    args = ("generate", "Repeat exactly: one two three four five", "-m", "smollm2-135m", "-n", "10", "--json")
    plain = json.loads(coinfer(*args, "--draft", "none").stdout)
    collective = (*args, "--engine", "collective", "--drafts", "ngram,smollm2-135m", "--draft-tokens", "3")
    proc = coinfer(*collective, "--every-draft")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["text"] == plain["text"] and out["engine"] == "collective"
    assert set(out["extras"]["acceptance_by_draft"]) == {"ngram", "smollm2-135m", "voted"}
    assert out["extras"]["acceptance_by_draft"]["smollm2-135m"] > 0.5  # the target's own weights draft
    assert (
        out["stats"]["drafted"] >= out["stats"]["accepted"] > 0
        and out["stats"]["n_tokens"] == out["n_tokens"]
    )
    # gated (the default), a draft as big as the target costs more than it saves: unused
    gated = json.loads(coinfer(*collective).stdout)
    assert gated["text"] == plain["text"] and gated["extras"]["rounds_drafting"]["smollm2-135m"] == 0
    assert gated["extras"]["pipelined_rounds"] is None  # the pipeline not allowed
    # allowed, the pipeline runs only where a draft model drafts and it measures faster
    piped = json.loads(coinfer(*collective, "--pipeline").stdout)
    assert piped["text"] == plain["text"]
    assert 0 <= piped["extras"]["pipelined_rounds"] <= piped["extras"]["verifications"]


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--max-tokens", "-5"], "max_tokens must be at least 1"),
        (["--temperature", "-1"], "temperature"),
        (["--draft-tokens", "-2"], "draft_tokens"),
        (["--engine", "collective", "--drafts", " , "], "--drafts names no drafter"),
        (["--draft-tokens", "lots"], "expected a whole number or 'auto'"),
        (["--engine", "fast"], "invalid choice"),
        (["--dtype", "bfloat16"], "applies to the transformers backend"),
    ],
)
def test_a_bad_flag_is_one_line_and_a_hint_before_any_model_loads(flags: list[str], needle: str) -> None:
    """The model named does not exist: the flag's error comes first, so nothing was loaded."""
    assert_user_error(coinfer("generate", "hi", "-m", "no-such-model", *flags, timeout=60), needle)


@needs_llama
def test_generate_with_the_llmcad_engine_reports_its_trees(smollm_path: Path) -> None:
    """The same model drafting for itself (a second context): the target's own text, in
    far fewer verifications than tokens under a budget; a draft that is no model is
    refused up front."""
    args = ("generate", "Count from one to ten.", "-m", "smollm2-135m", "-n", "16", "--json")
    plain = json.loads(coinfer(*args, "--draft", "none").stdout)
    # under a memory budget every round is a tree round (the target mapped, the draft resident)
    out = json.loads(
        coinfer(*args, "--engine", "llmcad", "--draft", "smollm2-135m", "--memory-budget", "4G").stdout
    )
    assert out["engine"] == "llmcad" and out["draft"] == "smollm2-135m"
    assert out["text"] == plain["text"]
    extras = out["extras"]
    assert 0 < extras["verifications"] < out["n_tokens"] and set(extras["modes"]) == {"tree"}
    assert extras["alpha_history"][0] == 0.01 and extras["bytes_read"] is not None
    # with no budget, a draft as dear as its target never drafts: prompt lookup does
    free = json.loads(coinfer(*args, "--engine", "llmcad", "--draft", "smollm2-135m").stdout)
    assert free["text"] == plain["text"] and set(free["extras"]["modes"]) == {"ngram"}
    assert_user_error(coinfer(*args, "--engine", "llmcad", "--draft", "ngram"), "needs a draft model")
    assert_user_error(coinfer(*args, "--engine", "llmcad"), "no default draft model for smollm2-135m")
