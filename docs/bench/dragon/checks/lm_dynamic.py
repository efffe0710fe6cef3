"""The language-modelling workload with dynamic weights (`dragon-dynamic`), as run for
`lm_dynamic.json`: the same windows and documents as `coinfer bench dragon --lm-windows 8`
(qwen2.5-coder-1.5b, 256-token windows, 2 documents per side), scored in one process.

    python docs/bench/dragon/checks/lm_dynamic.py > lm_dynamic.log
"""

import json

from coinfer.bench.dragon_lm import LmWorkload, perplexities
from coinfer.models import load_model

model = load_model("qwen2.5-coder-1.5b", n_threads=2)
result = perplexities(model, LmWorkload(window=256, windows=8), log=print)
print(json.dumps({k: result[k] for k in ("perplexity", "perplexity_by_half")}))
with open("lm_dynamic.json", "w") as f:
    json.dump(result, f)
