"""What tokens cost: a price table per model, and a ledger of usage per side and round.

Prices are US dollars per million input (prefill) and output (decode) tokens, the way
providers list them. The defaults are list prices of a few well-known cloud models
(checked 2025; edit them with ``PriceTable.with_overrides`` or a JSON file of
``{"model": [input, output]}``). A model that is not in the table costs nothing and is
reported as unpriced, never guessed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coinfer.chat.base import Usage
from coinfer.errors import ConfigError

__all__ = ["DEFAULT_PRICES", "Price", "PriceTable", "UsageLedger"]


@dataclass(frozen=True)
class Price:
    """Dollars per million input and output tokens."""

    input_per_m: float
    output_per_m: float

    def __post_init__(self) -> None:
        if self.input_per_m < 0 or self.output_per_m < 0:
            raise ConfigError(f"prices cannot be negative ({self.input_per_m}, {self.output_per_m})")

    def cost(self, usage: Usage) -> float:
        return (usage.prompt_tokens * self.input_per_m + usage.completion_tokens * self.output_per_m) / 1e6


DEFAULT_PRICES: Mapping[str, Price] = {
    "gpt-4o": Price(2.50, 10.00),
    "gpt-4o-mini": Price(0.15, 0.60),
    "gpt-4.1": Price(2.00, 8.00),
    "gpt-4.1-mini": Price(0.40, 1.60),
    "o1": Price(15.00, 60.00),
    "claude-3-5-sonnet": Price(3.00, 15.00),
    "claude-3-5-haiku": Price(0.80, 4.00),
}


@dataclass(frozen=True)
class PriceTable:
    """Model name → price; ``price_of`` is None for a model not in the table."""

    prices: Mapping[str, Price] = field(default_factory=lambda: dict(DEFAULT_PRICES))

    def price_of(self, model: str) -> Price | None:
        return self.prices.get(model)

    def with_overrides(self, overrides: Mapping[str, Price]) -> PriceTable:
        return PriceTable({**self.prices, **overrides})

    @classmethod
    def from_file(cls, path: str | Path) -> PriceTable:
        """The defaults updated by a JSON file ``{"model": [input_per_m, output_per_m], …}``."""
        try:
            raw = json.loads(Path(path).read_text())
            overrides = {str(k): Price(float(v[0]), float(v[1])) for k, v in raw.items()}
        except (OSError, ValueError, TypeError, IndexError, AttributeError) as exc:
            raise ConfigError(
                f"cannot read prices from {path}: {exc}",
                hint='write JSON like {"gpt-4o": [2.5, 10.0]} (dollars per million input, output tokens)',
            ) from exc
        return cls().with_overrides(overrides)


@dataclass
class UsageLedger:
    """Every call's usage, by side (``local``, ``remote``) and round; totals and dollars."""

    entries: list[tuple[str, int, Usage]] = field(default_factory=list)

    def add(self, side: str, round_: int, usage: Usage) -> None:
        self.entries.append((side, round_, usage))

    def total(self, side: str) -> Usage:
        out = Usage()
        for s, _, u in self.entries:
            if s == side:
                out = out + u
        return out

    def by_round(self, side: str) -> dict[int, Usage]:
        out: dict[int, Usage] = {}
        for s, r, u in self.entries:
            if s == side:
                out[r] = out.get(r, Usage()) + u
        return out

    def cost(self, side: str, price: Price | None) -> float:
        return price.cost(self.total(side)) if price else 0.0
