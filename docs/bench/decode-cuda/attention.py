"""Which attention kernel is fastest for decode shapes: few queries per key/value head
(group x k) over a masked static cache of ``span`` columns; each a CUDA graph of 50.

    PYTHONPATH=src python3 docs/bench/decode-cuda/attention.py
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from gemv import graph_us  # type: ignore[import-not-found]
from torch.nn.attention import SDPBackend, sdpa_kernel


def manual(q, k, v, mask, scale):  # type: ignore[no-untyped-def]
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale + mask
    return torch.matmul(torch.softmax(scores.float(), -1).to(q.dtype), v)


def main() -> None:
    for nkv, group, span in ((2, 6, 1024), (2, 7, 1024), (4, 7, 1024), (2, 6, 4096)):
        for k in (1, 16):
            q = torch.randn(1, nkv, group * k, 128, device="cuda", dtype=torch.bfloat16)
            kv = [torch.randn(1, nkv, span, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
            mask = torch.zeros(1, 1, group * k, span, device="cuda", dtype=torch.bfloat16)
            mask[..., 600:] = torch.finfo(torch.bfloat16).min
            ref = manual(q, *kv, mask, 0.088)
            cells = {}
            for name, backend in (
                ("default", None),
                ("efficient", SDPBackend.EFFICIENT_ATTENTION),
                ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("math", SDPBackend.MATH),
            ):

                def run(backend=backend):  # type: ignore[no-untyped-def]
                    if backend is None:
                        return F.scaled_dot_product_attention(q, *kv, attn_mask=mask, scale=0.088)  # noqa: B023  (called at once, inside the loop)
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q, *kv, attn_mask=mask, scale=0.088)  # noqa: B023  (called at once, inside the loop)

                try:
                    err = (run() - ref).abs().max().item()
                    cells[name] = f"{graph_us(run):6.1f} us (err {err:.3f})"
                except RuntimeError as exc:
                    cells[name] = f"fails: {str(exc)[:40]}"
            cells["manual"] = f"{graph_us(lambda: manual(q, *kv, mask, 0.088)):6.1f} us"  # noqa: B023  (called at once, inside the loop)
            print(
                f"kv heads {nkv} group {group} k {k:2d} span {span}: "
                + "; ".join(f"{n} {c}" for n, c in cells.items())
            )


if __name__ == "__main__":
    main()
