from coinfer.bench.collective import CollectiveBenchConfig, markdown, summarize


def _row(config: str, batch: int, tps: float, voted: float | None = 0.5) -> dict:
    return {
        "config": config,
        "batch": batch,
        "tokens_per_s": tps,
        "normalized_latency_s": 1 / tps,
        "identical": None if config == "plain" else 2,
        "acceptance": {"a": 0.4, "voted": voted},
    }


def test_the_summary_holds_ratios_to_plain_the_ablation_and_the_sweep() -> None:
    config = CollectiveBenchConfig(out="x", drafts=("a", "b"), batch_sizes=(1, 4), sweep_batch=4)
    rows = [
        _row("plain", 1, 10.0),
        _row("single:a", 1, 12.0),
        _row("default", 1, 12.0),
        _row("+majority", 1, 14.0),
        _row("+selector", 1, 15.0),
        _row("+pipeline", 1, 18.0),
        _row("plain", 4, 20.0),
        _row("+selector", 4, 30.0),
        _row("sweep:s=1", 4, 25.0),
        _row("sweep:s=2", 4, 32.0),
    ]
    s = summarize(rows, config)
    assert s["throughput_ratio_vs_plain"]["1"]["+pipeline"] == 1.8
    assert s["throughput_ratio_vs_plain"]["4"] == {"+selector": 1.5}
    assert s["ablation"]["1"] == {"default": 12.0, "+majority": 14.0, "+selector": 15.0, "+pipeline": 18.0}
    assert s["sweep"]["selector_vs_best_fixed"] == round(30 / 32, 3)
    assert s["acceptance"]["1"]["voted"] == 0.5
    table = markdown({"rows": rows})
    assert "| 1 | +pipeline | 18.0 |" in table and table.count("\n") == len(rows) + 4
