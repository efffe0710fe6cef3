"""``coinfer bench llmcad``: ROUGE-L, the BLD baseline, and the budget runner end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coinfer.bench.bld import bld_generate
from coinfer.bench.llmcad import LLMCadBenchConfig, rouge_l, run_llmcad_bench
from coinfer.errors import BudgetError, ConfigError
from coinfer.sandbox.cgroup import MemoryCgroup
from coinfer.testing import EOS, ScriptedModel, script
from tests.conftest import needs_llama


def test_rouge_l_is_the_f1_of_the_longest_common_subsequence() -> None:
    assert rouge_l([1, 2, 3], [1, 2, 3]) == 1.0
    assert rouge_l([4, 5], [1, 2, 3]) == 0.0
    assert rouge_l([1, 9, 3, 4], [1, 3, 4, 8, 8]) == pytest.approx(2 * 0.75 * 0.6 / 1.35)
    assert rouge_l([], []) == 1.0


def test_bld_keeps_the_big_models_text_when_the_little_one_is_right_and_bends_it_when_not() -> None:
    prompt = list(b"q: ")
    text = list(b"the answer is forty-two")
    big = ScriptedModel(script(len(prompt), [*text, EOS]), n_ctx=128)
    right = ScriptedModel(lambda p: {t: 0.9, ord("~"): 0.1} if (t := _next(p, prompt, text)) else {EOS: 1.0})
    out = bld_generate(big, right, prompt, max_tokens=40)
    assert out.tokens == text and out.verifications < len(text)
    # a little model confidently writing 'X' where the big model gives it no mass: rolled back
    wrong = ScriptedModel(lambda p: {ord("X"): 0.95, ord("~"): 0.05})
    assert bld_generate(big, wrong, prompt, max_tokens=40).tokens == text


def _next(prefix: list[int], prompt: list[int], text: list[int]) -> int | None:
    i = len(prefix) - len(prompt)
    return text[i] if 0 <= i < len(text) else None


def test_the_bench_refuses_systems_it_does_not_know_and_a_fraction_out_of_range() -> None:
    with pytest.raises(ConfigError, match="std and llmcad"):
        LLMCadBenchConfig(out="x", systems=("llmcad",))
    with pytest.raises(ConfigError, match="budget_fraction"):
        LLMCadBenchConfig(out="x", budget_fraction=1.5)


@needs_llama
def test_the_bench_runs_each_system_in_a_cgroup_and_reports_against_the_target_alone(
    tmp_path: Path, smollm_path: Path
) -> None:
    try:
        MemoryCgroup(64 * 2**20).remove()
    except BudgetError as exc:
        pytest.skip(f"no memory cgroup can be made here: {str(exc).splitlines()[0]}")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps({"id": f"p{i}", "category": "edit", "messages": [{"role": "user", "content": text}]})
            for i, text in enumerate(["Repeat: def add(a, b): return a + b", "Count from one to five."])
        )
    )
    config = LLMCadBenchConfig(
        out=str(tmp_path / "out"),
        target="smollm2-135m",
        draft="smollm2-135m",
        max_tokens=8,
        quick=True,
        prompts=str(prompts),
        systems=("std", "llmcad", "bld"),
        runtime_allowance=400 * 2**20,
    )
    report = run_llmcad_bench(config)
    s = report["summary"]
    assert s["total_prompts"] == 2 and not s["failed"], s["failed"]
    assert s["identical_outputs"] == 2  # the same weights draft: the target's own text
    assert set(s["speedup_vs"]) == {"std", "bld"} and s["rouge_l"]["llmcad"] == 1.0
    assert 0 < s["peak_mib"]["llmcad"] <= s["budget_mib"]
    assert s["verifications_per_token"]["llmcad"] < s["verifications_per_token"]["std"]
    for name in ("results.json", "results.md", "latency.png"):
        assert (tmp_path / "out" / name).is_file()


def test_a_system_past_its_time_is_stopped_with_its_prompts_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that runs too long (one thrashing under its budget) is ended; the prompts it
    printed before stay in the report, with the reason."""
    import subprocess

    from coinfer.bench import llmcad

    def too_slow(argv: list[str], **kwargs: object) -> None:
        raise subprocess.TimeoutExpired(argv, 30.0, output=b'{"id": "HumanEval/0", "tokens": [1]}\nnoise\n')

    monkeypatch.setattr(llmcad.subprocess, "run", too_slow)
    run = llmcad._run_child({"system": "llmcad"}, None, [], 30.0)
    assert run["rows"] == [{"id": "HumanEval/0", "tokens": [1]}]
    assert run["error"] == "stopped after 30 s"
