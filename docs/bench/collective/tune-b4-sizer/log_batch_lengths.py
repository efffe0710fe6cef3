"""Run `coinfer` with `draft_length.batch_lengths` and `trim_together` wrapped to log each
batch cut to /tmp/dbg2.log, each line tagged with its sizer (one per configuration run):
`python log_batch_lengths.py bench collective ...` (issue 21)."""

import json
import sys

import coinfer.decoding.draft_length as dl

LOG = open("/tmp/dbg2.log", "a")  # noqa: SIM115 (open for the whole run)
CUR = {"id": None}
orig_bl = dl.batch_lengths


def bl(survivals, cost, **kw):
    out = orig_bl(survivals, cost, **kw)
    b = len(survivals)
    LOG.write(
        json.dumps(
            {
                "sz": CUR["id"],
                "b": b,
                "props": [len(s) for s in survivals],
                "s": [[round(x, 2) for x in s[:6]] for s in survivals],
                "cost": {n: round(cost(n) * 1000, 1) for n in (b, 2 * b, 4 * b, 8 * b)},
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
    CUR["id"] = id(self) % 100000
    LOG.write(
        json.dumps(
            {
                "sz": CUR["id"],
                "tt": [(n, str(b)) for n, b in proposals],
                "stale": self._stale(len(proposals)),
                "rounds": self._rounds,
            }
        )
        + "\n"
    )
    return orig_tt(self, proposals)


dl.AdaptiveDraftLength.trim_together = tt
from coinfer.cli import main  # noqa: E402 (after the patch)

sys.exit(main(sys.argv[1:]))
