"""Bytes read and seconds for one 48-token forward of the target in the 820 MiB cgroup, three
ways in turn: the kernel's default advice for the mapping, MADV_SEQUENTIAL, and sequential with
the prefetcher following the forward. Run as the parent (makes the cgroup) or, with CHILD=1, as
the child inside it."""

import ctypes
import json
import os
import sys
import time

from coinfer import catalog

REPS = 12  # after 3 warm-up forwards, 4 of each way
t_path = catalog.prepared_path(catalog.get("qwen2.5-coder-1.5b"))
d_path = catalog.prepared_path(catalog.get("qwen2.5-coder-0.5b"))
budget = int(d_path.stat().st_size + 0.33 * t_path.stat().st_size)

if not os.environ.get("CHILD"):
    from coinfer.sandbox.cgroup import MemoryCgroup, evict_page_cache

    evict_page_cache(t_path)
    evict_page_cache(d_path)
    with MemoryCgroup(budget) as cg:
        p = cg.run([sys.executable, __file__], env={**os.environ, "CHILD": "1"}, timeout=900)
        print(p.stdout.strip() or p.stderr[-500:], "oom", cg.oom_kills())
    sys.exit()

from coinfer.models import load_model  # noqa: E402
from coinfer.models.load import budget_load_options  # noqa: E402
from coinfer.models.prefetch import WeightPrefetcher, disk_bytes_read  # noqa: E402

t = load_model("qwen2.5-coder-1.5b", n_ctx=1024, **budget_load_options("target"))
d = load_model("qwen2.5-coder-0.5b", n_ctx=1024, **budget_load_options("draft"))
prefetcher = WeightPrefetcher(t.weights_file, budget, model=t)  # advises the mapping sequential
libc = ctypes.CDLL(None)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
maps = [line.split()[0] for line in open("/proc/self/maps") if line.rstrip().endswith(str(t.weights_file.resolve()))]


def advise(kind: int) -> None:  # 0: MADV_NORMAL, 2: MADV_SEQUENTIAL
    for r in maps:
        lo, hi = (int(x, 16) for x in r.split("-"))
        libc.madvise(lo, hi - lo, kind)


tokens = t.tokenize("def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n" * 20)
seq = t.new_sequence()
t.extend(seq, tokens[:8])
ways = ["default", "sequential", "sequential+follow"]
seen: dict[str, list[tuple[float, int]]] = {w: [] for w in ways}
for rep in range(3 + REPS):
    way = ways[rep % 3]
    advise(0 if way == "default" else 2)
    t.truncate(seq, 8)
    if way.endswith("follow"):
        prefetcher.follow(from_start=True)
    else:
        prefetcher.pause()
    r0, t0 = disk_bytes_read(), time.perf_counter()
    t.extend(seq, tokens[8 + 48 * (rep % 3) : 8 + 48 * (rep % 3 + 1)])
    if rep >= 3:
        seen[way].append((time.perf_counter() - t0, disk_bytes_read() - r0))
prefetcher.close()
print(json.dumps({w: {"s": round(sum(s for s, _ in v) / len(v), 3), "GB": round(sum(b for _, b in v) / len(v) / 1e9, 3)} for w, v in seen.items()}))
