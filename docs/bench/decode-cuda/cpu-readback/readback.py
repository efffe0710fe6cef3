"""What greedy batches pay to read logits back, on the CPU: a target whose layers cost
little (2 layers of width 64) and whose vocabulary is Qwen2.5's (151,936), so that the
head, the readback and the host's work per row are what a round costs.

Run it once per checkout, interleaved, to compare two versions side by side:

    PYTHONPATH=src python3 docs/bench/decode-cuda/cpu-readback/readback.py
    MODEL=smollm2-135m PYTHONPATH=src python3 ...   # a catalogue model on llama.cpp instead

Prints, per configuration: tokens, wall seconds, tokens/s, and a digest of every output
(the same digest across versions: the same text).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections import deque
from typing import Any

import torch
from transformers import AutoModelForCausalLM, Qwen2Config

from coinfer.bench.broad_suite import broad_suite
from coinfer.chat import LocalChat
from coinfer.decoding import NgramDrafter, SamplingParams
from coinfer.engines import collective
from coinfer.models.architectures import byte_tokenizer
from coinfer.models.hf_static import HFStaticModel
from coinfer.models.load import load_model

PROMPTS = int(os.environ.get("PROMPTS", "16"))
TOKENS = int(os.environ.get("TOKENS", "96"))
MODEL = os.environ.get("MODEL")
BATCH = 4


def target() -> Any:
    if MODEL:
        return load_model(MODEL, n_ctx=2048, n_threads=1, n_seq_max=8)
    config = Qwen2Config(vocab_size=151936, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         eos_token_id=256, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    return HFStaticModel(model, byte_tokenizer(), name="tiny-151936", n_ctx=1024)


def digest(outputs: list[list[int]]) -> str:
    return hashlib.sha256(repr(outputs).encode()).hexdigest()[:12]


def run_collective(
    model: HFStaticModel, prompts: list[list[int]], drafts: list
) -> tuple[float, list[list[int]]]:
    config = collective.CollectiveConfig(
        max_tokens=TOKENS, max_batch=BATCH, draft_tokens="auto" if drafts else 0
    )
    start = time.perf_counter()
    runs = collective.generate(model, prompts, drafts=drafts, config=config)
    return time.perf_counter() - start, [r.tokens for r in runs]


def run_chat(model: Any, prompts: list[list[int]], mixed: bool = False) -> tuple[float, list[list[int]]]:
    """The plain server's loop (``PlainServed.serve``): every prompt a job, stepped to the end;
    ``mixed``: every other one sampled (temperature 1, seeded), the rest greedy."""
    with LocalChat(model, max_concurrent=BATCH) as chat:
        jobs = [
            job
            for i, p in enumerate(prompts)
            for job in chat.new_jobs(
                i,
                p,
                n=1,
                max_tokens=TOKENS,
                params=SamplingParams(temperature=1.0, seed=i) if mixed and i % 2 else SamplingParams(),
            )  # fmt: skip
        ]
        waiting, running = deque(jobs), []
        start = time.perf_counter()
        while waiting or running:
            running = chat.step(waiting, running)
        return time.perf_counter() - start, [job.tokens for job in jobs]


def main() -> None:
    torch.set_num_threads(1)
    model = target()
    texts = [case["messages"][-1]["content"][:200] for case in broad_suite()[:PROMPTS]]
    prompts = [model.tokenize(t) for t in texts]
    configs = {
        "plain batched (collective engine, s = 0)": lambda: run_collective(model, prompts, []),
        "collective, n-gram": lambda: run_collective(model, prompts, [NgramDrafter()]),
        "LocalChat (the plain server's batching)": lambda: run_chat(model, prompts),
        "LocalChat, half the requests sampled": lambda: run_chat(model, prompts, mixed=True),
    }
    for fn in configs.values():  # warm-up
        fn()
    for name, fn in configs.items():
        wall, outputs = fn()
        n = sum(len(o) for o in outputs)
        print(f"{name:42s} {n:5d} tokens {wall:7.3f} s {n / wall:7.1f} tok/s  outputs {digest(outputs)}")


if __name__ == "__main__":
    main()
