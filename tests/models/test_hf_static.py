"""Static KV caches (``HFStaticModel``): the CUDA path's cache logic, run on the CPU.

The contract suite (test_contract.py) runs the static model as one more subject; these
tests cover what only static caches have: a fixed number of slots, prompts longer than
one forward, batches whose rows attend over other spans, and refusals.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coinfer.errors import ConfigError, ModelError, SequenceError
from tests.conftest import needs_torch

pytestmark = needs_torch


@pytest.fixture(scope="module")
def long_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from coinfer.testing import tiny_hf_model_dir

    return tiny_hf_model_dir(tmp_path_factory.mktemp("long"), arch="qwen2", seed=3, context=2048)


@pytest.fixture(scope="module")
def pair(long_dir: Path):  # type: ignore[no-untyped-def]
    """The same tiny model on static (3 slots) and on dynamic caches."""
    from coinfer.models import load_model

    static = load_model(str(long_dir), backend="transformers", kv="static", n_ctx=2048, n_seq_max=3)
    dynamic = load_model(str(long_dir), backend="transformers", kv="dynamic", n_ctx=2048)
    return static, dynamic


def _static(folder: Path, **options: Any) -> Any:
    """The tiny model on static caches, built directly (for options ``load_model`` lacks)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coinfer.models.hf_static import HFStaticModel

    model, tokenizer = AutoModelForCausalLM.from_pretrained(folder), AutoTokenizer.from_pretrained(folder)
    return HFStaticModel(model, tokenizer, n_ctx=2048, **options)


def _ids(n: int, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 300, n).tolist()


def _logits(model, ids: list[int], **kw) -> np.ndarray:  # type: ignore[no-untyped-def]
    seq = model.new_sequence()
    try:
        return model.extend(seq, ids, **kw)
    finally:
        model.release(seq)


def test_a_prompt_longer_than_one_forward_is_read_in_pieces_with_the_same_logits(pair) -> None:  # type: ignore[no-untyped-def]
    static, dynamic = pair
    prompt = _ids(1300)
    np.testing.assert_allclose(_logits(static, prompt), _logits(dynamic, prompt), atol=1e-4)
    last = _logits(static, prompt, last_only=True)
    assert last.shape == (1, static.vocab_size)
    np.testing.assert_allclose(last[0], _logits(dynamic, prompt, last_only=True)[0], atol=1e-4)


def test_rows_of_a_batch_past_different_spans_match_dynamic_caches(pair) -> None:  # type: ignore[no-untyped-def]
    """One row 250 tokens in (its next tokens cross the first 256-column span), one at 10,
    one at 700: the batch attends over the widest span, each row over its own prefix."""
    static, dynamic = pair
    outs = []
    for model in pair:
        seqs = [model.new_sequence() for _ in range(3)]
        for seq, n in zip(seqs, (250, 10, 700), strict=True):
            model.extend(seq, _ids(n, n), last_only=True)
        outs.append(
            model.extend_many(list(zip(seqs, ([1, 2, 3, 4, 5, 6, 7, 8, 9], [4], [5, 6]), strict=True)))
        )
        for seq in seqs:
            model.release(seq)
    for got, want in zip(*outs, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-4)


def test_slots_are_a_fixed_budget_and_come_back_on_release(pair) -> None:  # type: ignore[no-untyped-def]
    static, _ = pair
    assert static.max_sequences == 3
    seqs = [static.new_sequence() for _ in range(3)]
    with pytest.raises(SequenceError, match="3 KV cache slots are all in use"):
        static.new_sequence()
    static.release(seqs[1])
    again = static.new_sequence()
    assert again.slot == seqs[1].slot  # type: ignore[attr-defined]
    for seq in (seqs[0], seqs[2], again):
        static.release(seq)


def test_without_a_fixed_number_the_slots_grow_and_keep_what_they_held(long_dir: Path, pair) -> None:  # type: ignore[no-untyped-def]
    from coinfer.models import load_model

    _, dynamic = pair
    model = load_model(str(long_dir), backend="transformers", kv="static", n_ctx=2048)
    assert model.max_sequences is None
    first = model.new_sequence()
    model.extend(first, _ids(30, 2))
    more = [model.new_sequence() for _ in range(12)]  # past the first 8 slots: the caches double
    for i, seq in enumerate(more):
        model.extend(seq, _ids(5, 10 + i))
    reference = dynamic.new_sequence()
    dynamic.extend(reference, _ids(30, 2))
    np.testing.assert_allclose(model.extend(first, [3, 4]), dynamic.extend(reference, [3, 4]), atol=1e-4)
    dynamic.release(reference)
    model.close()


def test_a_released_slot_reused_by_a_new_sequence_starts_empty(pair) -> None:  # type: ignore[no-untyped-def]
    static, dynamic = pair
    old = static.new_sequence()
    static.extend(old, _ids(40, 1))
    static.release(old)
    fresh = _logits(static, [7, 8, 9])
    np.testing.assert_allclose(fresh, _logits(dynamic, [7, 8, 9]), atol=1e-4)


def test_unsupported_architectures_and_kinds_are_refused_with_a_hint(long_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, GPT2Config

    from coinfer.models import load_model
    from coinfer.models.architectures import byte_tokenizer
    from coinfer.models.hf_static import static_unsupported
    from coinfer.models.load import wrap_transformers

    gpt2 = AutoModelForCausalLM.from_config(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=300))
    assert "architecture 'gpt2'" in (static_unsupported(gpt2) or "")
    with pytest.raises(ModelError, match="cannot use static KV caches") as err:
        wrap_transformers(gpt2, byte_tokenizer(), name="gpt2", n_ctx=64, kv="static")
    assert "dynamic" in (err.value.hint or "")
    with pytest.raises(ConfigError, match="unknown KV cache kind"):
        load_model(str(long_dir), backend="transformers", kv="paged")


def test_a_bias_on_only_some_of_q_k_v_is_refused_not_dropped() -> None:
    """Fused, the three projections take one bias or none: a model with a bias on q and v
    alone would lose them, so it is refused (and a GPU's automatic choice, which asks
    ``static_unsupported``, keeps it on dynamic caches)."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    from coinfer.models.architectures import byte_tokenizer
    from coinfer.models.hf_static import static_unsupported
    from coinfer.models.load import wrap_transformers

    model = AutoModelForCausalLM.from_config(LlamaConfig(**_COMMON, attention_bias=True))
    assert static_unsupported(model) is None
    model.model.layers[1].self_attn.k_proj.bias = None
    assert "only some have biases" in (static_unsupported(model) or "")
    with pytest.raises(ModelError, match="only some have biases"):
        wrap_transformers(model, byte_tokenizer(), name="partial", n_ctx=64, kv="static")


def test_on_a_cpu_the_default_stays_on_dynamic_caches(long_dir: Path) -> None:
    from coinfer.models import load_model
    from coinfer.models.hf_static import HFStaticModel

    model = load_model(str(long_dir), backend="transformers")
    assert not isinstance(model, HFStaticModel)
    model.close()


def test_forwards_padded_to_a_few_widths_give_each_real_token_its_logits(long_dir: Path, pair) -> None:  # type: ignore[no-untyped-def]
    """On a GPU a chain of 5 runs as 8 (one captured shape serves several widths); the
    padding tokens must change nothing the caller sees, in chains, trees and batches."""
    _, dynamic = pair
    padded = _static(long_dir, name="padded", pad_widths=True)
    models = (padded, dynamic)
    seqs = [m.new_sequence() for m in models]
    for m, seq in zip(models, seqs, strict=True):
        m.extend(seq, _ids(60, 4))

    def both(ids: list[int], **kw) -> None:  # type: ignore[no-untyped-def]
        got, want = (m.extend(seq, ids, **kw) for m, seq in zip(models, seqs, strict=True))
        np.testing.assert_allclose(got, want, atol=1e-4)

    for chain in ([5], [6, 7, 8], [1, 2, 3, 4, 5], list(range(9, 22))):
        both(chain)
    both([3, 4, 5], parents=[-1, 0, 0])
    for m, seq in zip(models, seqs, strict=True):
        m.commit_path(seq, [0, 2])
    both([7])
    dynamic.release(seqs[1])
    padded.close()


def test_a_batch_with_gaps_between_its_slots_runs_over_them_and_spares_the_gaps(long_dir: Path, pair) -> None:  # type: ignore[no-untyped-def]
    """On a GPU a batch whose requests finished in the middle (slots 0, 2, 3 of 4) runs as
    the full batch's shape, the gap an empty row: every row gets its own logits, and the
    sequence that owns the gap's slot keeps its cache."""
    _, dynamic = pair
    padded = _static(long_dir, name="padded-slots", slots=4, pad_slots=True)
    models = (padded, dynamic)
    seqs = [[m.new_sequence() for _ in range(4)] for m in models]
    for m, own in zip(models, seqs, strict=True):
        for i, seq in enumerate(own):
            m.extend(seq, _ids(30 + 7 * i, 10 + i))

    def batch(which: list[int], chains: list[list[int]]) -> None:
        got, want = (
            m.extend_many([(own[i], ids) for i, ids in zip(which, chains, strict=True)])
            for m, own in zip(models, seqs, strict=True)
        )
        for g, h in zip(got, want, strict=True):
            np.testing.assert_allclose(g, h, atol=1e-4)

    batch([0, 1, 2, 3], [[5], [6], [7], [8]])
    assert (padded.gap_forwards, padded.gap_rows) == (0, 0)
    batch([3, 0, 2], [[1, 2], [3], [4, 5, 6]])  # out of order, slot 1 a gap
    assert padded.shapes >= {(4, 1, 256, 0), (4, 3, 256, 0)}
    assert (padded.gap_forwards, padded.gap_rows) == (1, 1)  # the record a GPU run reads
    batch([1], [[9, 10]])  # the gap's owner: its cache untouched by the empty row
    assert (padded.gap_forwards, padded.gap_rows) == (2, 1 + 1)  # slot 1 alone runs over slot 0
    batch([3, 0], [list(range(20, 40)), [41]])  # wider than 16: gathered, not padded
    assert (2, 20, 256, None) in padded.shapes
    assert padded.gap_forwards == 2
    for own in seqs[1]:
        dynamic.release(own)
    padded.close()


_COMMON = dict(
    vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=512, bos_token_id=None, eos_token_id=256,
    pad_token_id=256,
)  # fmt: skip
_LLAMA3_ROPE = {
    "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
}  # fmt: skip
_YARN_ROPE = {
    "rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 64,
}  # fmt: skip
_VARIANTS = {
    "qwen3 (query and key norms, a head wider than hidden / heads)": ("Qwen3Config", {"head_dim": 32}),
    "llama 3 rope scaling": ("LlamaConfig", {"rope_parameters": _LLAMA3_ROPE}),
    "yarn rope scaling": ("LlamaConfig", {"rope_parameters": _YARN_ROPE}),
    "mistral with a narrower head and no window": ("MistralConfig", {"head_dim": 24, "sliding_window": None}),
    "tied embeddings": ("LlamaConfig", {"tie_word_embeddings": True}),
    "qwen2 (q/k/v biases)": ("Qwen2Config", {}),
}


@pytest.mark.parametrize("variant", list(_VARIANTS))
def test_each_variant_the_fused_decoder_accepts_gives_transformers_logits(variant: str) -> None:
    """A prompt read in one forward, then tokens one at a time, on static caches: each
    row's logits are transformers' own for the same text."""
    import torch
    import transformers

    from coinfer.models.architectures import byte_tokenizer
    from coinfer.models.hf_static import HFStaticModel

    kind, extra = _VARIANTS[variant]
    torch.manual_seed(0)
    config = getattr(transformers, kind)(**_COMMON, **extra)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # larger weights: distributions peaked enough to tell apart
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    ids = _ids(80, 4)
    with torch.inference_mode():
        expected = model(torch.tensor([ids])).logits[0].numpy()
    static = HFStaticModel(model, byte_tokenizer(), name=variant, n_ctx=256)
    seq = static.new_sequence()
    np.testing.assert_allclose(static.extend(seq, ids[:60]), expected[:60], atol=1e-4)
    steps = np.stack([static.extend(seq, [t])[0] for t in ids[60:]])
    np.testing.assert_allclose(steps, expected[60:], atol=1e-4)
