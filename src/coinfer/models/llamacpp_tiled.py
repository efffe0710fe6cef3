"""llama.cpp's tiled K-quant matmul: the least rows it takes, and what that asks of a
prompt resumed from a cached prefix.

The variable is added by ``scripts/patches/llama-tiled-min-rows.patch``; llama.cpp's own
threshold is 8. On this project's AVX2 machine a step of 8 to 15 rows ran 7-22% faster on
the stock path, 16 to 24 rows even, and from 32 rows (prompt chunks) the kernel wins; the
speculative engine served at a batch of 8 ran 10% faster with 16
(docs/bench/serve/one-off/tiled_matmul.txt). A user's own setting wins.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

__all__ = ["K_QUANT_TYPES", "TILED_MIN_ROWS", "TILED_MIN_ROWS_ENV", "resume_rows", "tiled_min_rows"]

TILED_MIN_ROWS_ENV = "GGML_CPU_TILED_MIN_ROWS"
TILED_MIN_ROWS = 16  # what coinfer's processes set, unless the variable is already set
K_QUANT_TYPES = frozenset(range(10, 16))  # GGML_TYPE_Q2_K .. Q8_K: the kernel's weights


def tiled_min_rows() -> int:
    """The least rows of a matmul that the tiled kernel takes in this process: the variable
    where set (coinfer sets it on importing llama.cpp), else llama.cpp's 8."""
    leading = re.match(r"\s*[+-]?\d+", os.environ.get(TILED_MIN_ROWS_ENV, ""))  # read as C's atoi
    rows = int(leading.group()) if leading else 0
    return rows if rows > 0 else 8  # the patch ignores a value it cannot use


def resume_rows(tensor_types: Iterable[int], least: int) -> int:
    """The least rows a prompt resumed from a cached prefix reads again (``min_tail``), so
    that they run on the kernels of the whole prompt's read: ``least`` (the other kernels'
    rule), and on a model with K-quant weights at least the tiled kernel's threshold. A
    tail of 8-15 rows beside a threshold of 16 moved the last logits by up to 0.39, and
    the same greedy request sent twice answered otherwise
    (docs/bench/serve/one-off/tail_rows_tiled.txt)."""
    if any(kind in K_QUANT_TYPES for kind in tensor_types):
        return max(least, tiled_min_rows())
    return least
