"""One-off (issue 21, sixth session): one category of the held-out broad suite at batch 1,
plain, single:ngram and +pipeline in turn, N times; see README.md beside it."""
import sys
from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.bench.collective import _load, _measure, _decode_rate, configurations, CollectiveBenchConfig, _with
cat = sys.argv[1]
suite = [p for p in split_suite(broad_suite(16), "held-out") if p["category"] == cat]
msgs = [p["messages"] for p in suite]
cfg = CollectiveBenchConfig(out="/tmp/x", suite="broad", only=("single:ngram", "+pipeline"), batch_sizes=(1,))
target = _load("qwen2.5-coder-1.5b", 4096)
models = {d: _load(d, 4096) for d in cfg.drafts if d != "ngram"}
confs = [(n, s, _with(e, max_batch=1)) for n, s, e in configurations(cfg)]
for rep in range(int(sys.argv[2])):
    for name, specs, e in confs:
        resp, wall = _measure(target, models, msgs, specs, e)
        ex = resp[0].extras
        print(rep, name, f"wall {wall:.1f} prefill {ex.get('prefill_s',0):.1f} decode {_decode_rate(resp, wall):.2f}",
              "rounds", ex.get("verifications"), "toks", [len(r.tokens) for r in resp], "drafting", ex.get("rounds_drafting"),
              "explore", ex.get("rounds_exploring"), "piped", ex.get("pipelined_rounds"), "probes", ex.get("pipeline_probes"),
              "draft_s", ex.get("draft_s"), "verify_s", ex.get("verify_s"), flush=True)
