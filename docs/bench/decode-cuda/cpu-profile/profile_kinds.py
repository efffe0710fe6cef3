"""The Jupiter profile of qwen2.5-coder-0.5b on one CPU thread, timed as each kind of stage
runs: transformers' layer on a dynamic cache, and a static-cache stage (``StaticStage``),
alternating, two runs each. Prints the head's ms and a layer's ms for 1..512 tokens with
nothing cached ([p=0]) and after 1024 ([p=1024]).

    PYTHONPATH=src python3 docs/bench/decode-cuda/cpu-profile/profile_kinds.py
"""

import torch

from coinfer.engines.jupiter.profile import profile_device
from coinfer.models.load import transformers_folder

torch.set_num_threads(1)
folder = transformers_folder("qwen2.5-coder-0.5b")
for kv in ("dynamic", "static", "dynamic", "static"):
    p = profile_device(folder, name="t", threads=1, base_bytes=0, fresh=True, kv=kv)
    print(
        kv, p.stage, "head", round(p.head_s * 1e3, 2), "ms; layer ms [p=0]:",
        [round(v * 1e3, 2) for v in p.layer_s[0]], "[p=1024]:", [round(v * 1e3, 2) for v in p.layer_s[2]],
    )  # fmt: skip
