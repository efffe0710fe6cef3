"""``coinfer bench decode`` writes the cost curve engines plan with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coinfer.bench.decode import DecodeBenchConfig, run_decode_bench
from coinfer.errors import ConfigError
from tests.conftest import needs_llama, needs_torch


@needs_llama
@needs_torch
def test_bench_decode_writes_json_and_markdown(
    tmp_path: Path, tiny_dirs: dict[str, Path], smollm_path: Path
) -> None:
    config = DecodeBenchConfig(
        out=str(tmp_path),
        models=("smollm2-135m", str(tiny_dirs["llama"])),
        backends=("llama.cpp", "transformers"),
        ks=(1, 4),
        decode_tokens=4,
        repeats=1,
        transformers_models=(str(tiny_dirs["llama"]),),
    )
    run_decode_bench(config, log=lambda _: None)
    report = json.loads((tmp_path / "results.json").read_text())
    rows = {(r["model"], r["backend"]): r for r in report["results"]}
    assert set(rows) == {
        ("smollm2-135m", "llama.cpp"),
        (str(tiny_dirs["llama"]), "llama.cpp"),
        (str(tiny_dirs["llama"]), "transformers"),
    }
    ok = rows[("smollm2-135m", "llama.cpp")]
    assert ok["decode_tokens_per_s"] > 0 and set(ok["forward_ms"]) == {"1", "4"}
    assert all(v > 0 for v in ok["forward_ms"].values())
    assert (
        "error" in rows[(str(tiny_dirs["llama"]), "llama.cpp")]
    )  # a directory is not a GGUF: skipped, said why
    assert rows[(str(tiny_dirs["llama"]), "transformers")]["decode_tokens_per_s"] > 0
    table = (tmp_path / "results.md").read_text()
    assert "| smollm2-135m | llama.cpp |" in table and "skipped:" in table
    assert report["environment"]["cpu_count"] >= 1


def test_bench_config_is_validated() -> None:
    with pytest.raises(ConfigError):
        DecodeBenchConfig(out="x", models=("smollm2-135m",), ks=(0,))
    with pytest.raises(ConfigError):
        DecodeBenchConfig(out="x", models=())


@needs_llama
def test_bench_speculative_writes_summary_table_and_plot(
    tmp_path: Path, smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from coinfer.bench.peers import start_peer
    from coinfer.bench.speculative import SpecBenchConfig, run_speculative_bench
    from coinfer.errors import ModelError

    monkeypatch.setenv("COINFER_PEERS", str(tmp_path / "no-peers-built"))
    with pytest.raises(ModelError) as info:
        start_peer(
            "llama-server-ngram-mod",
            target="smollm2-135m",
            model_path=str(smollm_path),
            eos=frozenset(),
            n_threads=None,
        )
    with pytest.raises(ConfigError, match="vocabulary"):  # no same-vocabulary draft for SmolLM2
        start_peer(
            "transformers-assisted", target="smollm2-135m", model_path="", eos=frozenset(), n_threads=None
        )
    assert "--build-peers" in (info.value.hint or "")

    prompts = tmp_path / "p.jsonl"
    code = "def add(a, b):\n    return a + b\n"
    lines = [
        {
            "id": "e1",
            "category": "edit",
            "messages": [{"role": "user", "content": f"Repeat exactly:\n{code}"}],
        },
        {
            "id": "h1",
            "category": "humaneval",
            "messages": [{"role": "user", "content": "Write def sub(a, b)."}],
        },
    ]
    prompts.write_text("\n".join(json.dumps(x) for x in lines))
    config = SpecBenchConfig(
        out=str(tmp_path / "out"), target="smollm2-135m", max_tokens=12, prompts=str(prompts)
    )
    run_speculative_bench(config, log=lambda _: None)
    report = json.loads((tmp_path / "out" / "results.json").read_text())
    summary = report["summary"]
    assert summary["total_prompts"] == 2 and 0 <= summary["identical_outputs"] <= 2
    assert summary["geomean_speedup"] > 0 and summary["min_speedup"] > 0
    assert set(summary["per_category"]) == {"edit", "humaneval"}
    assert set(report["peers"]) == {"llama-cpp-python-prompt-lookup"}
    assert (tmp_path / "out" / "results.md").read_text().count("|") > 10
    assert (tmp_path / "out" / "speedup.png").stat().st_size > 1000
    with pytest.raises(ConfigError, match="unknown peers"):
        SpecBenchConfig(out="x", peers=("nope",))
