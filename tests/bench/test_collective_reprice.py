import json
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

import coinfer.bench.collective_reprice as collective_reprice
import coinfer.bench.decode as decode
from coinfer.bench.collective import CollectiveBenchConfig
from coinfer.errors import ConfigError
from tests.bench.test_collective_priced import ClockedTarget, priced_row


class _Target(ClockedTarget):
    def __init__(self) -> None:
        super().__init__(slow=range(0))
        self.closed = False

    def chat_prompt(self, messages: object) -> list[int]:
        return list(range(40))

    def close(self) -> None:
        self.closed = True


def _finished_run(out: Path) -> dict[str, object]:
    """A finished batch-4 run of plain decoding and +majority, forwards recorded by shape,
    priced by a table timed in a slow spell of 4 rows of 4 tokens."""
    config = CollectiveBenchConfig(out=str(out), batch_sizes=(4,), sweep=False, only=("+majority",))
    plain = {**priced_row("plain", 40, [{"4": 10}], [{"4": 5}]), "forward_shapes_runs": [{"4x4": 10}],
             "shapes_by_category_runs": {"edit": [{"4x4": 5}]}}  # fmt: skip
    mine = {**priced_row("+majority", 40, [{"4": 6, "8": 2}], [{"4": 1, "8": 2}]),
            "forward_shapes_runs": [{"4x4": 6, "4x8": 2}],
            "shapes_by_category_runs": {"edit": [{"4x4": 1, "4x8": 2}]}}  # fmt: skip
    for row in (plain, mine):
        row.update(identical=None, normalized_latency_s=0.1)
    report = {"config": {**vars(config), "batch_sizes": [4], "dropped_field": 1}, "rows": [plain, mine],
              "forward_ms": {"4": {"4x4": 12.0, "4x8": 8.0}}}  # fmt: skip
    (out / "results.json").write_text(json.dumps(report))
    return report


def test_reprice_times_the_tables_again_and_keeps_what_the_run_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    before = _finished_run(tmp_path)
    target = _Target()
    monkeypatch.setattr(collective_reprice, "load_bench_model", lambda name, n_ctx: target)
    monkeypatch.setattr(decode, "time", SimpleNamespace(perf_counter=target.clock))
    collective_reprice.reprice(str(tmp_path), rounds=3, log=lambda _: None)
    after = json.loads((tmp_path / "results.json").read_text())
    # each forward: its tokens in ms; plain decoding's steps of 1 to 4 rows priced too
    assert after["forward_ms"] == {"4": {"1x1": 1.0, "2x2": 2.0, "3x3": 3.0, "4x4": 4.0, "4x8": 8.0}}
    assert after["forward_ms_replaced"] == [before["forward_ms"]]  # nothing lost
    assert after["rows"] == before["rows"]  # what the run measured stays as recorded
    assert after["config"]["price_rounds"] == 3 and target.closed
    # plain: 10 forwards of 4 rows of 4 tokens, +majority 6 of them and 2 of 8 tokens, as
    # many tokens: 40 ms each by the new table (by the old one, 1.36 times plain's rate)
    assert after["summary"]["priced"]["4"]["median"]["+majority"] == {"all": 1.0, "edit": 1.0}
    assert "| 4 | +majority | 1.000x |" in (tmp_path / "results.md").read_text()


def test_reprice_needs_a_finished_run_and_rounds_above_zero(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no results to reprice"):
        collective_reprice.reprice(str(tmp_path / "missing"), log=lambda _: None)
    _finished_run(tmp_path)
    with pytest.raises(ConfigError, match="price rounds"):
        collective_reprice.reprice(str(tmp_path), rounds=0, log=lambda _: None)


def test_a_saved_configuration_reads_back_with_tuples_and_the_new_out() -> None:
    config = CollectiveBenchConfig(out="a", batch_sizes=(4, 8), only=("+majority",))
    saved = json.loads(json.dumps({**vars(config), "unknown": True}))
    assert collective_reprice.saved_config(saved, "b") == replace(config, out="b")
