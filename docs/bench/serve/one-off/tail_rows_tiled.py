"""Which tails of a prompt continued from its own cached prefix give the last logits of
the whole prompt read at once, on a K-quant model with the tiled threshold in effect
(``GGML_CPU_TILED_MIN_ROWS``, 16 in coinfer's processes). ``python tail_rows_tiled.py
MODEL [PROMPTS]``: the unseen prompts' first PROMPTS (default 3), tails of 1 to 40 rows;
``TRIM=1``: each prompt cut to a multiple of 4 tokens, so that the tails of 4, 8, 12, 16...
rows start where a block of 4 does."""

import json
import os
import sys

import numpy as np

from coinfer.models import load_model

name, count = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3
model = load_model(name, n_ctx=2048, n_seq_max=4, kv_unified=False)
prompts = [json.loads(line)["messages"] for line in open("docs/bench/serve/prompts/unseen.jsonl")]
differ: dict[int, list[int]] = {}
for k, messages in enumerate(prompts[:count]):
    p = model.chat_prompt(messages)
    p = p[: len(p) - len(p) % 4] if os.environ.get("TRIM") else p
    s = model.new_sequence()
    full = model.extend(s, p, last_only=True)[-1]
    for t in range(1, 41):
        f = model.fork(s)
        model.truncate(f, len(p) - t)
        last = model.extend(f, p[-t:], last_only=True)[-1]
        model.release(f)
        if not np.array_equal(last, full):
            differ.setdefault(k, []).append(t)
    model.release(s)
print(name, f"min_tail {model.min_tail}, TRIM {os.environ.get('TRIM')}:", "tails whose last logits differ from the whole read:", differ)
