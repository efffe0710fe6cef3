"""Run `coinfer` with `draft_length.batch_lengths` (and `trim_together`) wrapped to log each
batch cut to /tmp/dbg.log: `python log_batch_lengths.py bench collective ...` (issue 21)."""

import json
import sys
import time

import coinfer.decoding.draft_length as dl

LOG = open("/tmp/dbg.log", "a")  # noqa: SIM115 (open for the whole run)
orig_bl = dl.batch_lengths


def bl(survivals, cost, **kw):
    out = orig_bl(survivals, cost, **kw)
    b = len(survivals)
    LOG.write(
        json.dumps(
            {
                "t": round(time.time(), 1),
                "ev": "bl",
                "b": b,
                "props": [len(s) for s in survivals],
                "s1": [round(s[0], 2) if s else None for s in survivals],
                "cost": {n: round(cost(n) * 1000, 1) for n in (b, b + 1, b + 4, 2 * b, 4 * b, 8 * b)},
                "most": kw.get("most"),
                "out": out,
            }
        )
        + "\n"
    )
    return out


dl.batch_lengths = bl
orig_tt = dl.AdaptiveDraftLength.trim_together


def tt(self, proposals):
    if not self.costs or self._stale(len(proposals)):
        LOG.write(
            json.dumps(
                {
                    "t": round(time.time(), 1),
                    "ev": "skip",
                    "b": len(proposals),
                    "empty": not self.costs,
                    "fw": getattr(self.costs, "forwards", None),
                    "pts": sorted(self.costs),
                }
            )
            + "\n"
        )
    return orig_tt(self, proposals)


dl.AdaptiveDraftLength.trim_together = tt
from coinfer.cli import main  # noqa: E402 (after the patch)

sys.exit(main(sys.argv[1:]))
