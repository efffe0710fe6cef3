"""16 requests through one LocalChat at width 8 (as `coinfer serve --engine speculative
--draft auto` serves them: n-gram drafts, batch floor 0, a cache per conversation), the
running requests' drafts verified beside prompt chunks (`beside`) or not (`apart`, the
code before 2026-12-02), alternated in one process (UNIFIED=1: one KV cache for all); prints tok/s and, for `beside`, the
reading steps that verified drafts and the tokens they kept. Run on top of 79f3c2e with
`git apply drafts_beside_reading.patch` (the change measured; not kept, see
drafts_beside_reading.txt)."""
import collections, sys, time
from coinfer.models import load_model
from coinfer.chat.local import LocalChat
from coinfer.chat.base import ChatRequest
from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.bench.workloads import build_suite

configs = sys.argv[1].split(","); n = int(sys.argv[2]); half = sys.argv[3]
width = 8
import os
if os.environ.get("UNIFIED") == "1":  # one cache for every sequence: a forward's rows run in one pass
    model = load_model("qwen2.5-coder-1.5b", n_ctx=4096 * width)
else:  # as coinfer serve loads its target: unequal rows per sequence run as separate passes
    model = load_model("qwen2.5-coder-1.5b", n_ctx=4096, n_seq_max=width + 2, kv_unified=False)
suite = build_suite(11)
which = {"tune": [p for i, p in enumerate(suite) if i % 4 != 3], "held": [p for i, p in enumerate(suite) if i % 4 == 3], "all": suite}[half]
reqs = [ChatRequest(messages=p["messages"], max_tokens=128, temperature=0.0) for p in which[:n]]
learned = Learned()
chat = LocalChat(model, max_concurrent=width, keep=0)
chat.chat(ChatRequest(messages=[{"role": "user", "content": "hi"}], max_tokens=4))
chat.speculator = BatchSpeculator.over(NgramDrafter(), target_costs(model, learned), batch_floor=0.0)
original = LocalChat._drafts_beside_reading
for cfg in configs:
    stats = collections.Counter()
    if cfg == "apart":
        chat._drafts_beside_reading = lambda feed, chunked: False
    else:
        chat.__dict__.pop("_drafts_beside_reading", None)
        orig_spec = LocalChat._speculate
        def spec(feed, speculator, chunked=(), orig_spec=orig_spec):
            before = sum(j.accepted for j, _ in feed)
            out = orig_spec(chat, feed, speculator, chunked)
            if chunked:
                stats["reading_steps"] += 1; stats["drafted"] += out[1]; stats["kept"] += sum(j.accepted for j, _ in feed) - before
            return out
        chat._speculate = spec
    t0 = time.perf_counter(); outs = chat.chat_batch(reqs); wall = time.perf_counter() - t0
    chat.__dict__.pop("_speculate", None)
    toks = sum(o.usage.completion_tokens for o in outs)
    print(f"{cfg}: {toks/wall:.2f} tok/s ({toks} in {wall:.1f}s) {dict(stats)}", flush=True)
