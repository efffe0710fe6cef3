"""The pure decoding algorithms every engine shares."""

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.generate import (
    GenerationStats,
    Response,
    generate,
    generate_tokens,
    stream_generate,
)
from coinfer.decoding.sampling import SamplingParams, probs_from_logits, sample

__all__ = [
    "GenerationStats",
    "IncrementalDetokenizer",
    "Response",
    "SamplingParams",
    "generate",
    "generate_tokens",
    "probs_from_logits",
    "sample",
    "stream_generate",
]
