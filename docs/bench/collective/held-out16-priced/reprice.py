"""One-off: time the target's forwards again for one batch size of a finished
``coinfer bench collective`` run, and summarize it again with that price table.

The batch-1 table of ``held-out16-priced`` was timed while a second bench process, started
by mistake, was loading its models: forwards over 32-49 tokens came out at 1.8-10.1 s
(29 tokens: 0.68 s). This times every size of that batch again, alone, on top of the same
prompt the bench used (the suite's first), and rewrites ``results.json`` and ``results.md``.

    .venv/bin/python docs/bench/collective/held-out16-priced/reprice.py \
        docs/bench/collective/held-out16-priced 1
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from coinfer.bench.collective import CollectiveBenchConfig, _load, _workload, finish
from coinfer.bench.collective_priced import forward_prices, sizes_seen


def main(out: Path, batch: int) -> None:
    report = json.loads((out / "results.json").read_text())
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in report["config"].items()}
    config = CollectiveBenchConfig(**fields)
    messages = [p["messages"] for p in _workload(config)]
    target = _load(config.target, config.n_ctx * max(config.batch_sizes))
    try:
        sizes = sizes_seen([r for r in report["rows"] if r["batch"] == batch])
        old = report["forward_ms"][str(batch)]
        new = forward_prices(target, target.chat_prompt(messages[0]), sizes)
    finally:
        target.close()
    for n in sizes:
        print(f"{n:4d} tokens: {old.get(str(n))} ms before, {new[str(n)]} ms now")
    report["forward_ms"][str(batch)] = new
    finish(report, config, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
