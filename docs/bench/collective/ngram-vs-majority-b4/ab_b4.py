"""single:ngram against +majority (models gated off) at batch 4, in alternating order,
per category, on the broad suite's held-out half (``--per-category 16``: 4 prompts a
category, one batch); each run's forwards priced by one table timed after the category's
runs, over plain decoding's mean in the same table.

Run: ``python ab_b4.py followup,edit PNMMNNMMP ab1.json`` (P plain, N single:ngram,
M +majority); other variants as JSON, letter -> [name, drafts, CollectiveConfig changes
over +majority's], e.g. ``'{"Z": ["ngram floor 0", ["ngram"], {"batch_floor": 0.0}]}'``.
Prints, per run, its priced and in-situ ratio, how many outputs equal plain decoding's,
and each request's decode rate over its plain one (by the clock)."""

import json
import os
import sys
from dataclasses import replace

sys.path.insert(0, os.path.dirname(__file__))

from harness import NAMES, held_out_b4  # noqa: E402

from coinfer.bench.collective import _measure, _span, _span_rate  # noqa: E402
from coinfer.bench.collective_priced import forward_prices  # noqa: E402
from coinfer.bench.collective_workloads import tokens_after_first  # noqa: E402

cats = sys.argv[1].split(",")
order = sys.argv[2]  # e.g. PNMMNNMMNP
out = sys.argv[3]
variants = dict(NAMES)
extra = json.loads(sys.argv[4]) if len(sys.argv) > 4 else {}  # letter -> [name, drafts, changes]
suite, target, models, engines = held_out_b4()
for letter, (name, specs, changes) in extra.items():
    variants[letter] = name
    engines[name] = (specs, replace(engines["+majority"][1], **changes))
res = []
for cat in cats:
    msgs = [p["messages"] for p in suite if p["category"] == cat]
    runs = []
    for letter in order:
        name = variants[letter]
        specs, engine = engines[name]
        responses, wall = _measure(target, models, msgs, specs, engine)
        ex = responses[0].extras
        runs.append(
            {
                "config": name,
                "wall": wall,
                "tokens": tokens_after_first(responses),
                "prefill_s": ex["prefill_s"],
                "verify_s": ex["verify_s"],
                "draft_s": ex["draft_s"],
                "shapes": ex["forward_shapes"],
                "shape_ms": ex["forward_shape_ms"],
                "longest": ex["longest_draft"],
                "out": [r.tokens for r in responses],
                "drafting": ex["rounds_drafting"],
                "spans": [_span_rate(_span(r)) for r in responses],
                "exploring": ex["rounds_exploring"],
            }
        )
        r = runs[-1]
        print(
            cat,
            name,
            f"wall {wall:.1f} verify {r['verify_s']:.1f} draft {r['draft_s']:.2f} "
            f"tok {r['tokens']} fw {sum(r['shapes'].values())} plain4 {r['shapes'].get('4x4', 0)}",
            flush=True,
        )
    keys = sorted({k for r in runs for k in r["shapes"]} | {"1x1", "2x2", "3x3", "4x4"})
    prompt = target.chat_prompt(msgs[0])
    prices = forward_prices(target, prompt, keys, 5)
    for r in runs:
        ms = sum(n * prices[k] for k, n in r["shapes"].items())
        r["priced_ms"] = ms
        r["category"] = cat
    res += runs
    plain = [r for r in runs if r["config"] == "plain"]
    base = sum(r["tokens"] / r["priced_ms"] for r in plain) / len(plain)
    for r in runs:
        print(
            cat,
            r["config"],
            "priced",
            round(r["tokens"] / r["priced_ms"] / base, 3),
            "insitu",
            round(r["tokens"] / (r["verify_s"] * 1000) / base, 3),
            "same-as-plain",
            sum(a == b for a, b in zip(r["out"], plain[0]["out"], strict=True)),
            "request rates vs plain",
            [round(a / b, 2) for a, b in zip(r["spans"], plain[0]["spans"], strict=True)],
            flush=True,
        )
    with open(out, "w") as f:
        json.dump({"prices": prices, "runs": res}, f)
