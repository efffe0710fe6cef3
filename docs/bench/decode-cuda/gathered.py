"""Does ``capture_shapes`` leave anything for dynamo to compile in a batch engine's first
gathered forwards (rows out of slot order: a prefill of joining requests, a sparse batch)?

In a fresh process: the random 1.5B on static caches, its shapes captured at load
(batches 1-4), then a gathered prefill (two prompts, slots 2 and 0) and a gathered one-token
forward (slots 5 and 0), each timed with dynamo's compiles counted. ``NOGATHER=1`` skips
the gathered compile at load, for the figure before it.

    PYTHONPATH=src python3 docs/bench/decode-cuda/gathered.py
"""

from __future__ import annotations

import json
import os
import time

from torch._dynamo.utils import counters

from coinfer.models.architectures import byte_tokenizer, random_weights_model
from coinfer.models.hf_static import HFStaticModel


def timed(label: str, call, out: dict) -> None:  # type: ignore[no-untyped-def]
    compiles, start = int(counters["stats"]["unique_graphs"]), time.perf_counter()
    call()
    out[label] = {
        "s": round(time.perf_counter() - start, 3),
        "compiles": int(counters["stats"]["unique_graphs"]) - compiles,
    }
    print(label, out[label], flush=True)


def main() -> None:
    model = HFStaticModel(
        random_weights_model(
            os.environ.get("MODEL", "qwen2.5-1.5b"), device=os.environ.get("DEVICE", "cuda"), dtype="float32"
        ),
        byte_tokenizer(),
        name="t",
        n_ctx=4096,
    )
    if os.environ.get("NOGATHER"):
        model._compile_gathered = lambda: None  # the figure before it (a diagnostic)
    out: dict = {"nogather": bool(os.environ.get("NOGATHER"))}
    timed("capture at load", lambda: model.capture_shapes(batches=(1, 2, 3, 4), spans=(256, 512, 1024)), out)
    seqs = [model.new_sequence() for _ in range(6)]
    prompt = list(range(40, 340))
    timed("gathered prefill", lambda: model.extend_many([(seqs[2], prompt), (seqs[0], prompt[:200])]), out)
    timed("gathered prefill again", lambda: model.extend_many([(seqs[3], prompt), (seqs[1], prompt)]), out)
    model.extend(seqs[5], prompt[:10])
    timed("gathered one token", lambda: model.extend_many([(seqs[5], [7]), (seqs[0], [8])]), out)
    timed("gathered one token again", lambda: model.extend_many([(seqs[5], [9]), (seqs[0], [10])]), out)
    print(json.dumps(out))
    if os.environ.get("OUT"):
        name = "gathered-nogather.json" if out["nogather"] else "gathered.json"
        with open(os.path.join(os.environ["OUT"], name), "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
