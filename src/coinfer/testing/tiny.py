"""Tiny randomly-initialised transformers models, written to disk with their tokenizer, so
the real loading path runs in tests with no download."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

__all__ = ["CHATML_TEMPLATE", "tiny_hf_model_dir"]

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

_CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "The quick brown fox jumps over the lazy dog.",
    "Collaborative inference lets a small model draft and a large model verify.",
    "for i in range(10):\n    print(i * i)\n",
    "Hello, world! Ünïcödé text and emoji 🙂 must round-trip.",
]


@functools.lru_cache(maxsize=4)
def _train_tokenizer(vocab_size: int):  # type: ignore[no-untyped-def]
    """Trained once per process, so tiny models built together share one vocabulary."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(_CORPUS * 4, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=special,
    )
    fast.chat_template = CHATML_TEMPLATE
    return fast


def tiny_hf_model_dir(
    folder: str | Path,
    *,
    arch: Literal["llama", "qwen2", "mistral"] = "llama",
    seed: int = 0,
    vocab_size: int = 320,
    hidden_size: int = 64,
    layers: int = 2,
    context: int = 512,
    window: int | None = None,
) -> Path:
    """Write a tiny random causal LM with its tokenizer to ``folder``; return it.
    ``window``: a sliding attention window, in every layer (Mistral) or in the layers after
    the first (Qwen2's ``max_window_layers``)."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

    folder = Path(folder)
    tok = _train_tokenizer(vocab_size)
    common = dict(
        vocab_size=len(tok),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
    )
    config: Any
    if arch == "mistral":
        config = MistralConfig(**common, sliding_window=window)
    elif arch == "qwen2" and window:
        config = Qwen2Config(**common, use_sliding_window=True, sliding_window=window, max_window_layers=1)
    else:
        config = LlamaConfig(**common) if arch == "llama" else Qwen2Config(**common)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # larger weights give peaked, seed-dependent distributions
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
