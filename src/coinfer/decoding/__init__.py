"""The pure decoding algorithms every engine shares, and the speculative engine.

``stream`` / ``generate`` with a ``SpecConfig`` are the speculative engine (plain
decoding with ``draft=None``); the drafters, the draft-length policies, lossless
acceptance, sampling and the one ``TokenTree`` are what the other engines build on.
"""

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.draft_length import AdaptiveDraftLength, DraftSizer, FixedDraftLength
from coinfer.decoding.drafters import Draft, Drafter
from coinfer.decoding.heads_drafter import HeadsDrafter
from coinfer.decoding.model_drafters import ModelDrafter, TextDrafter, open_drafter
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.prompting import as_prompt, check_prompt
from coinfer.decoding.response import DecodeStats, Response
from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample, sample_at
from coinfer.decoding.speculative import Round, SpecConfig, generate, generate_rounds, stream
from coinfer.decoding.verify import (
    accept_deterministic,
    accept_tree,
    coupled_accept,
    greedy_accept,
    speculative_accept,
)
from coinfer.models.tree import TokenTree

__all__ = [
    "AdaptiveDraftLength",
    "DecodeStats",
    "Draft",
    "DraftSizer",
    "Drafter",
    "FixedDraftLength",
    "HeadsDrafter",
    "IncrementalDetokenizer",
    "ModelDrafter",
    "NgramDrafter",
    "PositionDraws",
    "Response",
    "Round",
    "SamplingParams",
    "SpecConfig",
    "TextDrafter",
    "TokenTree",
    "accept_deterministic",
    "accept_tree",
    "as_prompt",
    "check_prompt",
    "coupled_accept",
    "generate",
    "generate_rounds",
    "greedy_accept",
    "open_drafter",
    "probs_from_logits",
    "sample",
    "sample_at",
    "speculative_accept",
    "stream",
]
