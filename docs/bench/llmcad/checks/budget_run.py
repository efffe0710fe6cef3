import os
import sys
from pathlib import Path

from coinfer import catalog
from coinfer.sandbox.cgroup import MemoryCgroup, evict_page_cache

t_path = catalog.prepared_path(catalog.get("qwen2.5-coder-1.5b"))
d_path = catalog.prepared_path(catalog.get("qwen2.5-coder-0.5b"))
budget = int(d_path.stat().st_size + float(os.environ.get("FRACTION", "0.33")) * t_path.stat().st_size)
for opts in sys.argv[1:]:
    evict_page_cache(t_path)
    evict_page_cache(d_path)
    with MemoryCgroup(budget) as cg:
        p = cg.run(
            [sys.executable, str(Path(__file__).with_name("budget_child.py")), str(budget), opts], timeout=900
        )
        print(opts, p.stdout.strip() or p.stderr[-300:], "oom", cg.oom_kills())
