"""``/metrics``' gauges read from what a served model keeps (no server needed)."""

from __future__ import annotations

from types import SimpleNamespace

from coinfer.serve.metrics import ServerMetrics


def test_a_model_on_static_caches_reports_its_gap_forwards_and_another_does_not() -> None:
    static = SimpleNamespace(gap_forwards=0, gap_rows=0)
    metrics = ServerMetrics(
        {"gpu": SimpleNamespace(depth=2, model=static), "cpu": SimpleNamespace(depth=0, model=object())}
    )
    static.gap_forwards, static.gap_rows = 3, 5  # read when scraped, not when registered
    text = metrics.text().decode()
    assert 'coinfer_slot_gap_forwards{model="gpu"} 3.0' in text
    assert 'coinfer_slot_gap_rows{model="gpu"} 5.0' in text
    assert 'coinfer_queue_depth{model="gpu"} 2.0' in text
    assert 'coinfer_slot_gap_forwards{model="cpu"}' not in text
