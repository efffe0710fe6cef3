"""One wave: 8 clients, 8 prompts, 8 slots, each system on a fresh server, rounds interleaved.
Prints each run's tok/s and its full-batch decode rate: the tokens emitted between the
eighth first token and the first last token (each stream's tokens spread evenly)."""
import asyncio, json, sys, time
from coinfer.bench.serve_concurrency import ConcurrencyConfig, _start
from coinfer.bench.serve_load import clients_at_once
from coinfer.bench.workloads import build_suite

systems = sys.argv[1].split(","); rounds = int(sys.argv[2]); offset = int(sys.argv[3]) if len(sys.argv) > 3 else 0
cfg = ConcurrencyConfig(levels=(8,), systems=tuple(systems))
suite = build_suite(11)
prompts = [p["messages"] for p in suite][offset:offset + 8]
out = []
for r in range(rounds):
    for name in systems if r % 2 == 0 else systems[::-1]:
        url, stop = _start(name, cfg)
        try:
            streams, wall = asyncio.run(clients_at_once(url, cfg.model, [(p, None) for p in prompts], list(range(8)), 8, max_tokens=128, deadline_s=3600))
        finally:
            stop()
        ok = [s for s in streams if s.error is None]
        firsts = [s.sent_s + s.first_s for s in ok]; lasts = [s.sent_s + s.last_s for s in ok]
        lo, hi = max(firsts), min(lasts)
        inwin = 0.0
        for s, f, l in zip(ok, firsts, lasts):
            if l > f:
                inwin += (s.tokens - 1) * max(0.0, min(hi, l) - max(lo, f)) / (l - f)
        full = inwin / (hi - lo) if hi > lo else None
        row = dict(system=name, round=r, tok_s=round(sum(s.tokens for s in ok) / wall, 2), wall=round(wall, 1),
                   first8=round(lo, 1), first_end=round(hi, 1), full_batch_tok_s=None if full is None else round(full, 2),
                   tokens=sum(s.tokens for s in ok), errors=len(streams) - len(ok),
                   timeline=[[round(s.sent_s + s.first_s, 1), round(s.sent_s + s.last_s, 1), s.tokens] for s in ok])
        print(json.dumps({k: v for k, v in row.items() if k != "timeline"}), flush=True)
        out.append(row)
json.dump(out, open("decode_wave.json", "w"), indent=1)
