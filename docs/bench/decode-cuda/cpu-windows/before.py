"""The static path against transformers' own forward on a tiny Mistral with a 16-token
window, before the window was in its mask (run from a checkout of a38460e): the largest
logit difference over the first 16 positions (inside the window) and over all 60.

    PYTHONPATH=<checkout of a38460e>/src python3 docs/bench/decode-cuda/cpu-windows/before.py
"""

from __future__ import annotations

import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, MistralConfig

from coinfer.models.hf_static import HFStaticModel
from coinfer.testing import tiny_hf_model_dir

folder = tiny_hf_model_dir(tempfile.mkdtemp(), arch="llama", seed=1, context=512)  # its tokenizer
tok = AutoTokenizer.from_pretrained(folder)
config = MistralConfig(
    vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512, sliding_window=16, bos_token_id=None,
    eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
)  # fmt: skip
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config).eval()
with torch.no_grad():
    for p in model.parameters():
        if p.dim() > 1:
            p.normal_(0.0, 0.3)
ids = np.random.default_rng(0).integers(0, 300, 60).tolist()
with torch.inference_mode():
    reference = model(torch.tensor([ids])).logits[0].numpy()
static = HFStaticModel(model, tok, name="tiny-mistral", n_ctx=512)
got = static.extend(static.new_sequence(), ids)
print("static vs transformers, first 16 positions:", float(np.abs(got[:16] - reference[:16]).max()))
print("static vs transformers, all 60 positions:  ", float(np.abs(got - reference).max()))
