"""What copying a transformers sequence's cache out to host memory and back costs (coinfer serve
-b transformers --cache-ram), against reading its tokens again. Three rounds.

    python hf_state_copy.py [MODEL]    # a catalogue name or a model folder; default qwen2.5-coder-0.5b
"""

import sys
import time

import numpy as np

from coinfer.models import load_model

name = sys.argv[1] if len(sys.argv) > 1 else "qwen2.5-coder-0.5b"
model = load_model(name, backend="transformers", n_ctx=1024)
prompt = model.tokenize("def quicksort(xs):\n    if len(xs) <= 1:\n        return xs\n" * 30)[:350]
for _ in range(3):
    seq = model.new_sequence()
    t0 = time.perf_counter()
    model.extend(seq, prompt, last_only=True)
    read = time.perf_counter() - t0
    t0 = time.perf_counter()
    state = model.save_state(seq)
    out = time.perf_counter() - t0
    t0 = time.perf_counter()
    back = model.restore(state)
    into = time.perf_counter() - t0
    same = np.array_equal(model.extend(seq, [42]), model.extend(back, [42]))
    print(
        f"{name}, {len(prompt)} tokens: read {read * 1000:.0f} ms; copy out {out * 1000:.1f} ms "
        f"({state.nbytes / 1e6:.1f} MB), back {into * 1000:.1f} ms; the same logits after: {same}"
    )
    model.release(seq)
    model.release(back)
