"""How fast the GPU's BLAS reads a weight matrix for a few rows (the decode shapes of the
1.5B), per library and call: each timed as a CUDA graph of 50 calls.

    PYTHONPATH=src python3 docs/bench/decode-cuda/gemv.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

SHAPES = {
    "qkv": (2048, 1536),
    "o": (1536, 1536),
    "gate_up": (17920, 1536),
    "down": (1536, 8960),
    "head": (151936, 1536),
}


def graph_us(fn, n: int = 50) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    g.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / n


def main() -> None:
    print("shape, rows: microseconds (GB/s of weights) per call")
    for name, (n, k) in SHAPES.items():
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        gb = n * k * 2 / 1e9
        for m in (1, 4, 16):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            cells = {}
            for lib in ("cublaslt", "cublas"):
                torch.backends.cuda.preferred_blas_library(lib)
                cells[lib] = graph_us(lambda: F.linear(x, w))  # noqa: B023  (called at once, inside the loop)
            torch.backends.cuda.preferred_blas_library("cublaslt")
            if m == 1:
                v = x[0]
                cells["mv"] = graph_us(lambda: torch.mv(w, v))  # noqa: B023  (called at once, inside the loop)
            print(
                f"{name:8s} m={m:2d}: "
                + ", ".join(f"{lib} {us:6.1f} ({gb / us * 1e6:5.0f})" for lib, us in cells.items())
            )


if __name__ == "__main__":
    main()
