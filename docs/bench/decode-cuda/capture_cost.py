"""What a forward shape costs the first times it is seen, against replaying its graph
(1.5B, H100). Measured once with an experiment since reverted, in which a shape ran
directly on its first call and was captured on its second:

    width 5: calls 1-4 ms 35.91 76.84 3.09 2.91
    width 7: calls 1-4 ms 29.98 85.93 3.23 3.07
    width 11: calls 1-4 ms 57.97 97.06 3.26 3.15
    width 13: calls 1-4 ms 31.16 66.41 3.28 3.20
    width 17: calls 1-4 ms 69.58 105.68 3.26 3.18

Capturing on the first call (the code as it is) saves the direct run.

    PYTHONPATH=src python3 docs/bench/decode-cuda/capture_cost.py
"""

import time

from coinfer.models.architectures import byte_tokenizer, random_weights_model
from coinfer.models.hf_static import ForwardRow, HFStaticModel

m = HFStaticModel(random_weights_model("qwen2.5-1.5b", device="cuda"), byte_tokenizer(), name="t", n_ctx=4096)
s = m.new_sequence()
m.extend(s, list(range(200)), last_only=True)
for w in (1, 2, 3):  # compile warm-up for these specializations
    for _ in range(3):
        m.forward_rows([ForwardRow.chain(s.slot, 300, list(range(w)))], "argmax")
for w in (5, 7, 11, 13, 17):
    t = []
    for _ in range(4):
        t0 = time.perf_counter()
        m.forward_rows([ForwardRow.chain(s.slot, 300, list(range(w)))], "argmax")
        t.append((time.perf_counter() - t0) * 1000)
    print(f"width {w}: calls 1-4 ms", " ".join(f"{x:.2f}" for x in t))
