"""A sliding attention window on the GPU path: a tiny Mistral-style model (every layer slides
a 16-token window) on static caches with CUDA graphs, against transformers' own forward on
the same device: a 48-token prompt (three windows), a token tree after it, its kept path
and one more token. The largest logit difference of each is printed; float32, so they should
be about 1e-5. The CPU runs the same check in tests/models/test_windows.py.

    PYTHONPATH=src python3 docs/bench/decode-cuda/windows.py      # DEVICE=cpu to try it here
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from coinfer.models.hf_static import HFStaticModel
from coinfer.models.tree import TokenTree
from coinfer.testing import tiny_hf_model_dir

DEVICE = os.environ.get("DEVICE", "cuda")
WINDOW = 16
PARENTS = [-1, 0, 0, 1, 3, -1, 5]
TOKENS = [7, 21, 5, 33, 2, 40, 11]


def path_to(node: int) -> list[int]:
    """The tree's tokens from its root to ``node``."""
    return [TOKENS[n] for n in TokenTree.of(TOKENS, PARENTS).path_to(node)]


def main() -> None:
    folder = tiny_hf_model_dir(tempfile.mkdtemp(), arch="mistral", seed=2, window=WINDOW)
    model = AutoModelForCausalLM.from_pretrained(folder).to(DEVICE).eval()

    def reference(ids: list[int]) -> np.ndarray:
        with torch.inference_mode():
            return model(torch.tensor([ids], device=DEVICE)).logits[0].float().cpu().numpy()

    static = HFStaticModel(model, AutoTokenizer.from_pretrained(folder), name="tiny-mistral", n_ctx=256)
    print(f"device {DEVICE}, graphs {static.graphs_enabled}, window {WINDOW}, n_ctx {static.n_ctx}")
    prompt = np.random.default_rng(5).integers(0, 300, 3 * WINDOW).tolist()
    seq = static.new_sequence()
    worst = {"prompt": float(np.abs(static.extend(seq, prompt) - reference(prompt)).max())}
    tree = static.extend(seq, TOKENS, parents=PARENTS)
    worst["tree"] = max(
        float(np.abs(tree[n] - reference(prompt + path_to(n))[-1]).max()) for n in range(len(TOKENS))
    )
    static.commit_path(seq, [0, 1, 3, 4])
    for step, token in enumerate((9, 12, 3)):  # one-token forwards: graph replays on a GPU
        kept = [*prompt, *path_to(4), 9, 12, 3][: len(prompt) + 5 + step]
        got = static.extend(seq, [token])[-1]
        worst[f"token {step + 1}"] = float(np.abs(got - reference(kept)[-1]).max())
    print("largest logit difference from transformers' own forward:")
    for part, value in worst.items():
        print(f"  {part:8s} {value:.2e}")
    print("shapes run:", sorted(static.shapes))
    print("PASS" if max(worst.values()) < 1e-3 else "FAIL")


if __name__ == "__main__":
    main()
