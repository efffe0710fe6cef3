"""Jupiter's two stages on this CPU: one token through qwen2.5-coder-0.5b's 24 layers on one
thread, 16 tokens after a 40-token prompt, twice each, interleaved (``log.txt``).
``prof`` as an argument adds a profile of the static stage.

    PYTHONPATH=src .venv/bin/python docs/bench/decode-cuda/cpu-stages/stage_cmp.py
"""

import cProfile
import pstats
import sys
import time

import torch

from coinfer.engines.jupiter.stage import Stage
from coinfer.engines.jupiter.static_stage import StaticStage
from coinfer.models.load import transformers_folder

torch.set_num_threads(1)
folder = transformers_folder("qwen2.5-coder-0.5b")
stages = {"dynamic": Stage.load(folder, 0, 24), "static": StaticStage.load(folder, 0, 24, n_ctx=4096)}
ids = torch.randint(10, 1000, (1, 40))
for stage in stages.values():
    stage.forward(ids, 0, logits="none")
for _ in range(2):
    for name, stage in stages.items():
        stage.truncate(40)
        t = time.perf_counter()
        for i in range(16):
            stage.forward(torch.tensor([[100 + i]]), 40 + i, logits="hidden")
        print(name, "ms/token", (time.perf_counter() - t) / 16 * 1000)
if len(sys.argv) > 1:
    stage = stages["static"]
    stage.truncate(40)
    profile = cProfile.Profile()
    profile.enable()
    for i in range(16):
        stage.forward(torch.tensor([[100 + i]]), 40 + i, logits="hidden")
    profile.disable()
    pstats.Stats(profile).sort_stats("tottime").print_stats(15)
