"""Batched decoding on the GPU path as requests finish one by one: the graphs it captures
while timed, with and without the slot padding, and with the likely shapes captured at load.

A batch of 4 whose requests end at different times used to meet new forward shapes for a
long time (a graph is keyed by batch, width, span and first slot), each a capture of tens
of forwards inside the timed run. With ``pad_slots`` a batch with gaps runs over slots
0..s; ``capture_shapes`` takes the (batch, width, span) shapes at load. Three settings,
each from no graphs, run plain batched decoding and the gated collective engine
(engines.py's oracle 0.5B draft and the n-gram source) three times on the same prompts;
every output must equal plain decoding's.

    OUT=/tmp/out PYTHONPATH=src python3 docs/bench/decode-cuda/batched.py
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

from coinfer.bench.broad_suite import broad_suite  # noqa: E402
from coinfer.decoding import NgramDrafter  # noqa: E402
from coinfer.decoding.model_drafters import ModelDrafter  # noqa: E402
from coinfer.engines import collective  # noqa: E402
from coinfer.models.architectures import byte_tokenizer, random_weights_model  # noqa: E402
from coinfer.models.hf_static import HFStaticModel  # noqa: E402
from engines import CONTEXT, DEVICE, DTYPE, OracleDrafter  # noqa: E402

TOKENS = int(os.environ.get("TOKENS", "96"))
PROMPTS = int(os.environ.get("PROMPTS", "24"))
REPEATS = int(os.environ.get("REPEATS", "3"))
BATCH = 4


def run(target: HFStaticModel, small: HFStaticModel, prompts: list[list[int]], truth: dict | None) -> tuple:
    """Plain batched decoding when ``truth`` is None, else the gated collective engine."""
    drafts = (
        [] if truth is None else [OracleDrafter(ModelDrafter(small, target=target), truth), NgramDrafter()]
    )
    config = collective.CollectiveConfig(
        max_tokens=TOKENS, max_batch=BATCH, draft_tokens="auto" if drafts else 0
    )
    graphs, compiles = target.graph_count + small.graph_count, _compiles()
    start = time.perf_counter()
    runs = collective.generate(target, prompts, drafts=drafts, config=config)
    wall = time.perf_counter() - start
    extras = runs[-1].extras
    new = {
        "graphs": target.graph_count + small.graph_count - graphs,
        "compiles": _compiles() - compiles,
        **{k: extras.get(k) for k in ("prefill_s", "verify_s", "draft_s", "forward_sizes")},
    }
    return runs, wall, new


def _compiles() -> int:
    """Graphs dynamo has compiled so far in this process (each a compile of seconds)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def setting(
    target: HFStaticModel, small: HFStaticModel, prompts: list[list[int]], name: str, truth: dict
) -> tuple[dict, dict]:
    """``truth``: every prompt's plain output, filled by the first setting's first run."""
    for model in (target, small):
        model.drop_graphs()  # each setting starts with no graphs
        model.pad_slots = name != "unpadded"
        model.shapes.clear()
        model.gap_forwards = model.gap_rows = 0
    out: dict = {"repeats": []}
    if name == "padded, captured at load":
        start = time.perf_counter()
        out["captured_at_load"] = sum(
            m.capture_shapes(batches=range(1, BATCH + 1), spans=(256, 512, 1024)) for m in (target, small)
        )
        out["capture_s"] = round(time.perf_counter() - start, 2)
    for _ in range(REPEATS):
        plain, plain_wall, plain_new = run(target, small, prompts, None)
        truth = truth or {tuple(ids): r.tokens for ids, r in zip(prompts, plain, strict=True)}
        runs, wall, new = run(target, small, prompts, truth)
        same = sum(r.tokens == list(truth[tuple(ids)]) for ids, r in zip(prompts, runs, strict=True))
        same_plain = sum(r.tokens == list(truth[tuple(ids)]) for ids, r in zip(prompts, plain, strict=True))
        tokens = sum(r.stats.n_tokens for r in plain)
        out["repeats"].append(
            {
                "plain_tok_s": round(tokens / plain_wall, 1),
                "plain_new": plain_new,
                "collective_tok_s": round(sum(r.stats.n_tokens for r in runs) / wall, 1),
                "collective_vs_plain": round(plain_wall / wall, 3),
                "collective_new": new,
                "identical": f"{same}/{len(runs)} collective, {same_plain}/{len(plain)} plain",
                "accepted": f"{sum(r.stats.accepted for r in runs)}/{sum(r.stats.drafted for r in runs)}",
            }
        )
        print(name, out["repeats"][-1], flush=True)
    out["target_shapes"] = len(target.shapes)
    # forwards that ran over a gap between their slots (a request done mid-batch), and the
    # empty rows they ran: 0 with the padding off, by construction
    out["target_gap_forwards"], out["target_gap_rows"] = target.gap_forwards, target.gap_rows
    return out, truth


def main() -> None:
    tok = byte_tokenizer()
    big = "qwen2.5-1.5b" if DEVICE == "cuda" else "qwen2.5-0.5b"
    target = HFStaticModel(random_weights_model(big, device=DEVICE, dtype=DTYPE), tok, name="t", n_ctx=4096)
    small = HFStaticModel(
        random_weights_model("qwen2.5-0.5b", device=DEVICE, seed=1, dtype=DTYPE), tok, name="d", n_ctx=4096
    )
    suite = broad_suite()
    prompts = [
        tok("\n".join(m["content"] for m in p["messages"]))["input_ids"][-CONTEXT:]
        for p in suite[:: max(1, len(suite) // PROMPTS)][:PROMPTS]
    ]
    if os.environ.get("WARMUP", "1") == "1":  # compile the steps once (dynamo's cache outlives graphs)
        run(target, small, prompts[:4], None)
    report = {"tokens": TOKENS, "prompts": len(prompts), "batch": BATCH, "dtype": DTYPE, "settings": {}}
    truth: dict = {}
    names = os.environ.get("SETTINGS", "unpadded;padded;padded, captured at load").split(";")
    for name in names:
        report["settings"][name], truth = setting(target, small, prompts, name, truth)
    print(json.dumps(report, indent=1))
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], f"batched-{DTYPE}.json"), "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
