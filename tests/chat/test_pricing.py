"""Dollars from usage: the price table and the per-side, per-round ledger."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coinfer.chat import Price, PriceTable, Usage, UsageLedger
from coinfer.errors import ConfigError


def test_cost_is_priced_per_million_input_and_output_tokens() -> None:
    gpt4o = PriceTable().price_of("gpt-4o")
    assert gpt4o is not None
    assert gpt4o.cost(Usage(1_000_000, 100_000)) == pytest.approx(2.50 + 1.00)
    assert PriceTable().price_of("my-own-model") is None  # unpriced, not guessed


def test_prices_can_be_overridden_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"gpt-4o": [5, 20], "mine": [1, 2]}))
    table = PriceTable.from_file(path)
    assert table.price_of("gpt-4o") == Price(5, 20) and table.price_of("mine") == Price(1, 2)
    assert table.price_of("gpt-4o-mini") == PriceTable().price_of("gpt-4o-mini")
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read prices"):
        PriceTable.from_file(path)
    with pytest.raises(ConfigError):
        Price(-1, 0)


def test_the_ledger_totals_by_side_and_round() -> None:
    ledger = UsageLedger()
    ledger.add("remote", 1, Usage(100, 10, 1))
    ledger.add("local", 1, Usage(5000, 300, 8))
    ledger.add("remote", 2, Usage(50, 5, 1))
    assert ledger.total("remote") == Usage(150, 15, 2)
    assert ledger.by_round("remote") == {1: Usage(100, 10, 1), 2: Usage(50, 5, 1)}
    assert ledger.cost("remote", Price(1_000_000, 0)) == pytest.approx(150)
    assert ledger.cost("local", None) == 0.0
