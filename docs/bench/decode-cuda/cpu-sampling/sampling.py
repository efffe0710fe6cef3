"""The host's cost of drawing one sampled token from a 151,936-token vocabulary, before and
after the partial sort (2026-11-28): ``probs_from_logits`` then ``sample_at``, on real
next-token logits of qwen2.5-coder-0.5b (llama.cpp) over suite prompts.

On the GPU path a 1.5B forward takes about 2.2 ms; this is what each sampled token adds
on the host, for every backend. ``BEFORE`` names a copy of the old ``sampling.py``.

    BEFORE=/tmp/sampling_before.py PYTHONPATH=src python3 docs/bench/decode-cuda/cpu-sampling/sampling.py
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import numpy as np

from coinfer.bench.broad_suite import broad_suite
from coinfer.decoding import sampling as after
from coinfer.models.load import load_model

ROWS = int(os.environ.get("ROWS", "48"))
SETTINGS = {
    "temperature 0.7": after.SamplingParams(temperature=0.7),
    "temperature 0.7, top-p 0.9": after.SamplingParams(temperature=0.7, top_p=0.9),
    "temperature 1.0, top-p 0.95": after.SamplingParams(temperature=1.0, top_p=0.95),
    "temperature 0.7, top-k 40": after.SamplingParams(temperature=0.7, top_k=40),
    "temperature 0.7, top-k 40, top-p 0.9": after.SamplingParams(temperature=0.7, top_k=40, top_p=0.9),
}


def real_logits() -> list[np.ndarray]:
    """Next-token logits at the last ``ROWS // 6`` positions of six suite prompts."""
    model = load_model("qwen2.5-coder-0.5b", n_ctx=2048, n_threads=2)
    rows = []
    for case in broad_suite()[int(os.environ.get("OFFSET", "0")) :: 9][:6]:
        seq = model.new_sequence()
        ids = model.tokenize(case["messages"][-1]["content"][:600])
        rows.extend(model.extend(seq, ids)[-(ROWS // 6) :])
        model.release(seq)
    model.close()
    return rows


def per_token_ms(module, rows: list[np.ndarray], params) -> tuple[float, list[int]]:  # type: ignore[no-untyped-def]
    drawn = []
    start = time.perf_counter()
    for i, row in enumerate(rows):
        drawn.append(module.sample_at(module.probs_from_logits(row, params), (i * 0.618) % 1.0))
    return (time.perf_counter() - start) / len(rows) * 1e3, drawn


def main() -> None:
    spec = importlib.util.spec_from_file_location("before", os.environ["BEFORE"])
    before = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules["before"] = before  # its dataclasses look their module up
    spec.loader.exec_module(before)  # type: ignore[union-attr]
    rows = real_logits()
    print(f"{len(rows)} rows of {rows[0].size} logits; host ms per sampled token, two runs each, alternating")
    for name, params in SETTINGS.items():
        times: dict[str, list[float]] = {"before": [], "after": []}
        tokens = set()
        for _ in range(2):
            for label, module in (("before", before), ("after", after)):
                ms, drawn = per_token_ms(module, rows, params)
                times[label].append(ms)
                tokens.add(tuple(drawn))
        b, a = (", ".join(f"{v:.2f}" for v in times[k]) for k in ("before", "after"))
        same = "same tokens" if len(tokens) == 1 else "TOKENS DIFFER"
        print(f"{name:38s} before {b:>13s}   after {a:>13s}   {same}")


if __name__ == "__main__":
    main()
