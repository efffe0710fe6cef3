import sys, time, threading, collections
from coinfer.models import load_model
from coinfer.models.shared import SharedModel
from coinfer.engines.llmcad.session import ENGINE
from coinfer.engines.llmcad import LLMCadConfig
from coinfer.decoding.engine import Request
from coinfer.bench.workloads import build_suite

n_threads = int(sys.argv[1]); kw = eval(sys.argv[2]) if len(sys.argv) > 2 else {}
target = load_model("qwen2.5-coder-1.5b", n_ctx=8192)
draft = load_model("qwen2.5-coder-0.5b", n_ctx=8192)
prompts = [target.chat_prompt(p["messages"]) for p in build_suite(per_category=3)[:8]]
config = LLMCadConfig(max_tokens=96, max_batch=max(2, n_threads), **kw)
with ENGINE.open({"target": target, "draft_model": draft}, config) as s:
    sizes = collections.Counter(); dsizes = collections.Counter()
    for m, c in ((s.model, sizes), (s.draft, dsizes)):
        inner = m.model; orig = inner._extend_batch
        def wrap(fw, orig=orig, c=c):
            c[len(fw)] += 1; return orig(fw)
        inner._extend_batch = wrap
    s.generate(Request(prompt=prompts[0][:50], max_tokens=8))  # warm
    sizes.clear(); dsizes.clear()
    outs = [None] * len(prompts); idx = iter(range(len(prompts))); lock = threading.Lock()
    def worker():
        while True:
            with lock:
                i = next(idx, None)
            if i is None: return
            outs[i] = s.generate(Request(prompt=prompts[i]))
    t0 = time.perf_counter()
    ths = [threading.Thread(target=worker) for _ in range(n_threads)]
    [t.start() for t in ths]; [t.join() for t in ths]
    wall = time.perf_counter() - t0
    toks = sum(len(o.tokens) for o in outs)
    modes = collections.Counter(m for o in outs for m in o.extras.get("modes", []))
    print(f"threads {n_threads} {kw}: {toks/wall:.2f} tok/s wall {wall:.1f} tokens {toks}")
    print(" drafted", sum(o.stats.drafted for o in outs), "accepted", sum(o.stats.accepted for o in outs), "rounds", sum(o.stats.rounds for o in outs))
    print(" modes", dict(modes), "target batches", sorted(sizes.items()), "draft batches", sorted(dsizes.items())[:8])
