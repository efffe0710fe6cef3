"""One-off (issue 21, sixth session): one category of the held-out broad suite at batch 4,
plain and single:ngram in turn, N times; see README.md beside it."""
import sys, time, json
from dataclasses import replace
from coinfer import catalog
from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.bench.collective import _load, _measure, _decode_rate, FIXED_S
from coinfer.engines.collective import CollectiveConfig
cat = sys.argv[1]
suite = [p for p in split_suite(broad_suite(16), "held-out") if p["category"] == cat]
msgs = [p["messages"] for p in suite]
target = _load("qwen2.5-coder-1.5b", 4096)
base = CollectiveConfig(max_tokens=128, draft_tokens=FIXED_S, max_batch=4)
cfgs = [("plain", (), replace(base, draft_tokens=0)), ("ngram", ("ngram",), base)]
for rep in range(int(sys.argv[2])):
    for name, specs, cfg in cfgs:
        resp, wall = _measure(target, {}, msgs, specs, cfg)
        ex = resp[0].extras
        print(rep, name, f"wall {wall:.1f} prefill {ex.get('prefill_s',0):.1f} decode {_decode_rate(resp, wall):.2f}",
              "rounds", ex.get("verifications"), "toks", [len(r.tokens) for r in resp],
              "acc", ex.get("acceptance_by_draft"), "verify_s", ex.get("verify_s"), flush=True)
