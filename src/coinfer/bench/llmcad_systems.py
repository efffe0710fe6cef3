"""The systems ``coinfer bench llmcad`` compares, each run in a child process of its own
(``python -m coinfer.bench.llmcad_systems SPEC``, inside the memory cgroup the bench made).

The spec (JSON) names the system, the models, the prompts, the token budget and the
memory budget (None: no budget). Under a budget the target loads memory-mapped with its
weights unrepacked and small batches, and a draft loads resident: what
``coinfer generate --memory-budget`` does. One JSON line per prompt goes to stdout as it
finishes, so a child the OOM killer ends still leaves what it measured.

- ``std``: the target alone (plain greedy decoding);
- ``stdpl``: the target alone with LLMCad's weight loading (the prefetcher follows each forward);
- ``sp``: classic speculative decoding, the same draft model, a fixed k;
- ``bld``: Big Little Decoder (``bench.bld``);
- ``auto``: coinfer's speculative engine as shipped (``--draft auto``);
- ``llmcad``: the LLMCad engine.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from typing import Any, Literal

import numpy as np

from coinfer.bench.bld import bld_generate
from coinfer.decoding import ModelDrafter, Response, SpecConfig, stream
from coinfer.engines.llmcad import LLMCadConfig
from coinfer.engines.llmcad import stream as llmcad_stream
from coinfer.errors import ConfigError
from coinfer.models import SteerableModel, load_model
from coinfer.models.load import budget_load_options
from coinfer.models.prefetch import WeightPrefetcher, disk_bytes_read

__all__ = ["SYSTEMS", "run_system"]

SYSTEMS = ("std", "stdpl", "sp", "bld", "auto", "llmcad")
NEEDS_DRAFT = ("sp", "bld", "llmcad")
PREFETCHING = ("stdpl", "llmcad")  # the systems with LLMCad's weight loading
_EXTRAS = (
    "tree_sizes",
    "fallbacks",
    "modes",
    "speculative",
    "alpha_history",
    "draft_s",
    "verify_s",
    "prefetched_bytes",
)


def _load(spec: dict[str, Any]) -> tuple[SteerableModel, SteerableModel | None]:
    budget = spec["budget"] is not None
    target_opts = budget_load_options("target") if budget else {}
    if spec["system"] not in PREFETCHING:  # llama.cpp as it comes: no eval callback
        target_opts.pop("layer_progress", None)
    draft_opts = budget_load_options("draft") if budget else {}
    target = load_model(spec["target"], n_ctx=spec["ctx"], **target_opts)
    draft = None
    if spec["system"] in NEEDS_DRAFT:
        draft = load_model(spec["draft"], n_ctx=spec["ctx"], **draft_opts)
    return target, draft


def _follow(responses: Iterator[Response]) -> dict[str, Any]:
    """An engine's stream gathered into a row, the bytes read so far noted at the first token."""
    tokens: list[int] = []
    first_read = None
    for r in responses:
        tokens += r.tokens
        first_read = disk_bytes_read() if first_read is None else first_read
    s = r.stats
    row = _row(tokens, (s.last_token_at or 0) - (s.first_token_at or 0), s.ttft_s, s.rounds, first_read)
    row["extras"] = {k: r.extras[k] for k in _EXTRAS if k in r.extras}
    return row


def _row(
    tokens: list[int], decode_s: float, ttft_s: float, verifications: int, read: int | None
) -> dict[str, Any]:
    return {"tokens": tokens, "decode_s": decode_s, "ttft_s": ttft_s, "verifications": verifications,
            "extras": {}, "read_at_first_token": read}  # fmt: skip


def _speculative(
    spec: dict[str, Any], target: SteerableModel, draft: Any, prompt: list[int]
) -> dict[str, Any]:
    k: int | Literal["auto"] = int(spec["sp_k"]) if spec["system"] == "sp" else "auto"
    config = SpecConfig(max_tokens=spec["max_tokens"], draft_tokens=k)
    return _follow(stream(target, prompt, draft=draft, config=config))


def _llmcad(
    spec: dict[str, Any], target: SteerableModel, draft: SteerableModel, prompt: list[int]
) -> dict[str, Any]:
    config = LLMCadConfig(max_tokens=spec["max_tokens"], memory_budget=spec["budget"])
    return _follow(llmcad_stream(target, prompt, draft=draft, config=config))


def _std_prefetched(spec: dict[str, Any], target: SteerableModel, prompt: list[int]) -> dict[str, Any]:
    """Plain greedy decoding; every forward followed by the prefetcher from its first layer."""
    if target.weights_file is None:
        raise ConfigError("stdpl needs a memory budget (a memory-mapped target)")
    prefetcher = WeightPrefetcher(target.weights_file, spec["budget"], model=target)
    seq = target.new_sequence()
    start = time.perf_counter()
    try:
        prefetcher.follow(from_start=True)
        token = int(np.argmax(target.extend(seq, prompt, last_only=True)[-1]))
        first_at, first_read = time.perf_counter(), disk_bytes_read()
        tokens: list[int] = []
        while token not in target.eos_ids and len(tokens) < spec["max_tokens"]:
            tokens.append(token)
            if len(tokens) == spec["max_tokens"]:
                break
            prefetcher.follow(from_start=True)
            token = int(np.argmax(target.extend(seq, [token])[-1]))
        end = time.perf_counter()
    finally:
        prefetcher.close()
        target.release(seq)
    return _row(tokens, end - first_at, first_at - start, max(0, len(tokens) - 1), first_read)


def _bld(
    spec: dict[str, Any], target: SteerableModel, draft: SteerableModel, prompt: list[int]
) -> dict[str, Any]:
    marks: list[int | None] = []
    r = bld_generate(
        target, draft, prompt, max_tokens=spec["max_tokens"], on_first=lambda: marks.append(disk_bytes_read())
    )
    return _row(
        r.tokens, r.total_s - r.first_token_s, r.first_token_s, r.verifications, marks[0] if marks else None
    )


def run_system(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One result per prompt: its tokens, decode time, verifications and bytes read."""
    target, draft = _load(spec)
    try:
        for item in spec["prompts"]:
            prompt = target.chat_prompt(item["messages"])
            before = disk_bytes_read()
            system = spec["system"]
            if system in ("std", "auto", "sp"):
                d = None if system == "std" else (ModelDrafter(draft) if draft is not None else "auto")
                row = _speculative(spec, target, d, prompt)
            elif system == "stdpl":
                row = _std_prefetched(spec, target, prompt)
            elif system == "bld":
                row = _bld(spec, target, draft, prompt)  # type: ignore[arg-type]
            else:
                row = _llmcad(spec, target, draft, prompt)  # type: ignore[arg-type]
            after, first = disk_bytes_read(), row.pop("read_at_first_token", None)
            row["bytes_read"] = None if before is None or after is None else after - before
            row["decode_bytes_read"] = None if first is None or after is None else after - first
            yield {"id": item["id"], **row}
    finally:
        if draft is not None:
            draft.close()
        target.close()


def main() -> None:
    spec = json.loads(sys.argv[1])
    for row in run_system(spec):
        sys.stdout.write(json.dumps(row) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
