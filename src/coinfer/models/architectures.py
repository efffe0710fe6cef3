"""Published model architectures with random weights, for timing where no weights can reach.

A forward's cost depends on the architecture's shapes, not on the weights' values, so a
GPU machine that cannot download a checkpoint can still time the real Qwen2.5 family.
The configurations are the published ``config.json`` values of the Qwen2.5 base models
(the Coder models share them); the tokenizer is byte-level (256 byte tokens and an
end-of-text token), enough to turn a prompt into ids.
"""

from __future__ import annotations

from typing import Any

from coinfer.errors import ConfigError
from coinfer.models.hf import import_torch

__all__ = ["ARCHITECTURES", "byte_tokenizer", "random_weights_model", "weight_bytes"]

# hidden, intermediate, layers, attention heads, key/value heads, vocabulary, tied embeddings
_QWEN25 = {
    "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 151936, True),
    "qwen2.5-1.5b": (1536, 8960, 28, 12, 2, 151936, True),
    "qwen2.5-3b": (2048, 11008, 36, 16, 2, 151936, True),
    "qwen2.5-7b": (3584, 18944, 28, 28, 4, 152064, False),
    "qwen2.5-14b": (5120, 13824, 48, 40, 8, 152064, False),
}
ARCHITECTURES: tuple[str, ...] = tuple(_QWEN25)


def _config(name: str) -> Any:
    from transformers import Qwen2Config

    try:
        hidden, inter, layers, heads, kv_heads, vocab, tied = _QWEN25[name]
    except KeyError:
        raise ConfigError(
            f"no published architecture named {name!r}", hint=f"choose one of {', '.join(ARCHITECTURES)}"
        ) from None
    return Qwen2Config(
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0},
        rms_norm_eps=1e-6,
        hidden_act="silu",
        bos_token_id=None,
        eos_token_id=256,
        pad_token_id=256,
    )


def byte_tokenizer() -> Any:
    """A transformers tokenizer of the 256 bytes and ``<|endoftext|>`` (id 256)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {char: i for i, char in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>")


def random_weights_model(name: str, *, device: str = "cpu", dtype: str = "bfloat16", seed: int = 0) -> Any:
    """The architecture ``name`` (``ARCHITECTURES``) with random weights, built on ``device``."""
    torch = import_torch()
    from transformers import AutoModelForCausalLM, GenerationConfig

    config = _config(name)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig(eos_token_id=256, pad_token_id=256)
    return model.eval()


def weight_bytes(model: Any) -> int:
    """Bytes of the model's distinct parameters (tied ones once): what one forward reads."""
    seen = {p.data_ptr(): p.numel() * p.element_size() for p in model.parameters()}
    return sum(seen.values())
