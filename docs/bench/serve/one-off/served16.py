"""The 16 prompts of the 16-client level against a fresh server (as the bench starts it),
16 streaming clients at once. Usage: served16.py SYSTEM[,SYSTEM..] ROUNDS"""
import sys, asyncio, time
from coinfer.bench.serve_concurrency import ConcurrencyConfig, _start, _rate, _median_ttft
from coinfer.bench.serve_load import clients_at_once
from coinfer.bench.workloads import build_suite
names, rounds = sys.argv[1].split(","), int(sys.argv[2])
cfg = ConcurrencyConfig(systems=tuple(names), levels=(16,), per_category=11)
suite = build_suite(11)
work = [(p["messages"], None) for p in suite]
for r in range(rounds):
    for name in (names if r % 2 == 0 else names[::-1]):
        url, stop = _start(name, cfg)
        try:
            streams, wall = asyncio.run(clients_at_once(url, cfg.model, work, list(range(16)), 16, max_tokens=cfg.max_tokens, deadline_s=cfg.deadline_s))
        finally:
            stop()
        firsts = sorted(round(s.first_s + s.sent_s) for s in streams if s.first_s)
        ends = sorted(round(s.last_s + s.sent_s) for s in streams if s.last_s)
        print(f"round {r} {name}: {_rate(streams, wall):.2f} tok/s in {wall:.1f}s TTFT p50 {_median_ttft(streams)} firsts {firsts} ends {ends[:8]}", flush=True)
