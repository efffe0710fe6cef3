"""How many rows a prompt resumed from a cached prefix reads again, by the model's weights
and the tiled kernel's threshold in this process."""

from __future__ import annotations

import pytest

from coinfer.models.llamacpp_tiled import TILED_MIN_ROWS_ENV, resume_rows, tiled_min_rows

Q4_1, Q8_0, Q4_K, Q6_K = 3, 8, 12, 14


@pytest.mark.parametrize(
    ("setting", "rows"), [("16", 16), ("64", 64), ("24 rows", 24), ("0", 8), ("many", 8), (None, 8)]
)
def test_the_threshold_is_the_variable_where_llama_cpp_would_take_it(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, rows: int
) -> None:
    if setting is None:
        monkeypatch.delenv(TILED_MIN_ROWS_ENV, raising=False)
    else:
        monkeypatch.setenv(TILED_MIN_ROWS_ENV, setting)
    assert tiled_min_rows() == rows


def test_only_k_quant_weights_raise_the_tail_to_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TILED_MIN_ROWS_ENV, "16")
    assert resume_rows([Q8_0, Q4_K, Q6_K], 8) == 16
    assert resume_rows([Q4_1, Q8_0], 8) == 8  # SmolLM2's: never the tiled kernel
    monkeypatch.setenv(TILED_MIN_ROWS_ENV, "4")
    assert resume_rows([Q4_K], 8) == 8  # never below the other kernels' rule
