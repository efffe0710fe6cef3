"""The bench's summary for two sets of questions apart: the ones symmetric aggregation's
waiting rule was tried on (trip, meeting) and the ones held out (the rest).

    python docs/bench/dragon/checks/halves.py docs/bench/dragon/symmetric/results.json
"""

from __future__ import annotations

import json
import sys

from coinfer.bench.dragon import summarize

TRIED = {"trip", "meeting"}
KEYS = (
    "latency_reduction_vs_tw",
    "live_over_best_fixed",
    "both_reduction_vs_tw",
    "both_over_best_fixed",
    "ttft_ratio_vs_device_only",
    "both_ttft_ratio_vs_device_only",
)


def main(path: str) -> None:
    report = json.load(open(path))
    delays = report["config"]["delays_s"]
    runs = report["runs"]
    for name, keep in (("tried", lambda i: i in TRIED), ("held out", lambda i: i not in TRIED)):
        rows = [r for r in runs if keep(r["id"])]
        if not rows:
            continue
        s = summarize(rows, delays)
        print(f"## {name}: {sorted({r['id'] for r in rows})}")
        for key in KEYS:
            print(f"{key}: {s[key]}")
        for system in ("drdg-tw", "drdg-tw-both", "dragon-device", "dragon-cloud", "dragon-live", "dragon-both"):
            print(f"{system} s/token: {s['latency_s'][system]}")
        print()


if __name__ == "__main__":
    main(sys.argv[1])
