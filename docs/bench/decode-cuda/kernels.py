"""Where one static-cache forward's time goes on the GPU: kernels per forward, their
time, the graph replay alone and the whole call (``forward_rows``) around it.

    PYTHONPATH=src python3 docs/bench/decode-cuda/kernels.py qwen2.5-0.5b qwen2.5-1.5b
"""

from __future__ import annotations

import sys
import time
from collections import Counter

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from coinfer.models.architectures import byte_tokenizer, random_weights_model
from coinfer.models.hf_static import ForwardRow, HFStaticModel


def main(name: str, k: int = 1) -> None:
    model = HFStaticModel(random_weights_model(name, device="cuda"), byte_tokenizer(), name=name, n_ctx=4096)
    seq = model.new_sequence()
    model.extend(seq, np.random.default_rng(0).integers(0, 256, 512).tolist(), last_only=True)
    rows = [ForwardRow.chain(seq.slot, 512, list(range(k)))]
    for _ in range(3):
        model.forward_rows(rows, "argmax")
    graph = next(g for key, (g, _, _) in model._graphs.items() if key[:2] == (1, k))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(50):
        graph.replay()
    end.record()
    end.synchronize()
    replay = start.elapsed_time(end) / 50
    t0 = time.perf_counter()
    for _ in range(50):
        model.forward_rows(rows, "argmax")
    call = (time.perf_counter() - t0) / 50 * 1000
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            graph.replay()
        torch.cuda.synchronize()
    kernels: Counter[str] = Counter()
    times: Counter[str] = Counter()
    for e in prof.events():
        if e.device_type.name == "CUDA":
            kernels[e.name[:70]] += 1
            times[e.name[:70]] += e.device_time
    total = sum(kernels.values()) / 5
    print(
        f"{name} k={k}: graph replay {replay:.3f} ms, whole call {call:.3f} ms, "
        f"{total:.0f} kernels per forward"
    )
    for kname, us in times.most_common(12):
        print(f"  {us / 5:8.1f} us  x{kernels[kname] / 5:5.0f}  {kname}")
    model.close()


if __name__ == "__main__":
    for arg in sys.argv[1:] or ["qwen2.5-0.5b"]:
        main(arg)
