"""The pure decoding algorithms every engine shares."""

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.drafters import Draft, Drafter, ModelDrafter, NgramDrafter, TextDrafter
from coinfer.decoding.generate import GenerationStats, Response, generate, generate_tokens, stream_generate
from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample, sample_at
from coinfer.decoding.speculative import (
    Round,
    SpecConfig,
    SpecStats,
    speculative_generate,
    stream_speculative,
)
from coinfer.decoding.tree import TokenTree
from coinfer.decoding.verify import coupled_accept, greedy_accept, speculative_accept

__all__ = [
    "Draft",
    "Drafter",
    "GenerationStats",
    "IncrementalDetokenizer",
    "ModelDrafter",
    "NgramDrafter",
    "PositionDraws",
    "Response",
    "Round",
    "SamplingParams",
    "SpecConfig",
    "SpecStats",
    "TextDrafter",
    "TokenTree",
    "coupled_accept",
    "generate",
    "generate_tokens",
    "greedy_accept",
    "probs_from_logits",
    "sample",
    "sample_at",
    "speculative_accept",
    "speculative_generate",
    "stream_generate",
    "stream_speculative",
]
