"""Token-wise sync (lookahead 0) against Speculative Aggregation (lookahead 8) through the
latency relay, before `coinfer bench dragon` exists. Starts `coinfer rag cloud` on core 1
and runs `coinfer rag ask` on core 0, SmolLM2 on both, one thread each, the corpora in
``corpora/``. One run per cell: a look, not a benchmark."""

import json
import os
import subprocess
import sys
from pathlib import Path

from coinfer.bench.relay import LatencyRelay

HERE = Path(__file__).parent
env = {**os.environ, "COINFER_LINK_TOKEN": "relay-check"}
cloud = subprocess.Popen(
    ["taskset", "-c", "1", sys.executable, "-m", "coinfer", "rag", "cloud", "--corpus", str(HERE / "corpora/cloud"),
     "-m", "smollm2-135m", "--threads", "1", "--listen", "127.0.0.1:0"],
    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
)
port = int(cloud.stdout.readline().split()[-3].rpartition(":")[2])
try:
    for rtt in (0.0, 0.1, 0.3):
        with LatencyRelay(("127.0.0.1", port), rtt_s=rtt, jitter_s=rtt / 5) as relay:
            for lookahead in ("0", "8"):
                p = subprocess.run(
                    ["taskset", "-c", "0", sys.executable, "-m", "coinfer", "rag", "ask", "--corpus",
                     str(HERE / "corpora/device"), "-m", "smollm2-135m", "--threads", "1", "--cloud",
                     f"127.0.0.1:{relay.port}", "--lookahead", lookahead, "--max-tokens", "40", "--json",
                     "Which simulation game should I buy?"],
                    capture_output=True, text=True, env=env, check=True,
                )
                r = json.loads(p.stdout)
                print(f"rtt {rtt:.1f} s lookahead {lookahead}: {r['decode_tokens_per_s']} tok/s, TTFT {r['ttft_s']} s, "
                      f"accepted {r['accepted']}, rejected {r['rejected']}, fallback {r.get('fallback')}")
finally:
    cloud.terminate()
    cloud.wait(timeout=30)
