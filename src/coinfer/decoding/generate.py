"""Plain autoregressive generation in three layers (as mlx-lm does it).

``generate_tokens`` yields token ids from a steerable model; ``stream_generate`` turns
them into ``Response`` objects carrying text deltas and running stats; ``generate``
blocks and returns the final ``Response``. Speculative engines reuse the stats and the
detokenizer.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.sampling import PositionDraws, SamplingParams, probs_from_logits, sample_at
from coinfer.errors import ConfigError, ContextOverflowError
from coinfer.models.base import SteerableModel

__all__ = [
    "GREEDY",
    "GenerationStats",
    "Response",
    "check_prompt",
    "generate",
    "generate_tokens",
    "stream_generate",
]

GREEDY = SamplingParams()


@dataclass
class GenerationStats:
    """Counts and timings of one generation; all times in seconds."""

    prompt_tokens: int = 0
    n_tokens: int = 0
    start: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    last_token_at: float | None = None

    def token(self) -> None:
        now = time.perf_counter()
        self.n_tokens += 1
        self.first_token_at = self.first_token_at or now
        self.last_token_at = now

    @property
    def ttft_s(self) -> float:
        return (self.first_token_at or time.perf_counter()) - self.start

    @property
    def total_s(self) -> float:
        return (self.last_token_at or time.perf_counter()) - self.start

    @property
    def tokens_per_s(self) -> float:
        """End to end: tokens over the whole time, prefill included."""
        return self.n_tokens / self.total_s if self.total_s > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        """Decode only: tokens after the first over the time from first to last token."""
        if self.n_tokens < 2 or self.first_token_at is None or self.last_token_at is None:
            return 0.0
        span = self.last_token_at - self.first_token_at
        return (self.n_tokens - 1) / span if span > 0 else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "n_tokens": self.n_tokens,
            "ttft_s": round(self.ttft_s, 4),
            "total_s": round(self.total_s, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 3),
        }


@dataclass
class Response:
    """One step of a stream: the new text, the token, and the state so far.

    ``tokens`` and ``stats`` are the stream's live objects, shared by all its responses
    (copy them to keep a snapshot).
    """

    text: str
    token: int | None
    tokens: list[int]
    stats: GenerationStats
    finish_reason: str | None = None  # "stop" (end of turn), "length" (budget or context)
    spec: Any = None  # SpecStats when a drafter was used


def check_prompt(model: SteerableModel, prompt: Sequence[int]) -> None:
    """A prompt must be non-empty and leave room in the context window for one token."""
    if not prompt:
        raise ConfigError("the prompt is empty")
    if len(prompt) >= model.n_ctx:
        raise ContextOverflowError(
            f"the prompt has {len(prompt)} tokens and {model.name}'s context window holds {model.n_ctx}",
            hint="shorten the prompt or load the model with a larger --ctx",
        )


def generate_tokens(
    model: SteerableModel,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    sampling: SamplingParams = GREEDY,
) -> Iterator[int]:
    """Yield up to ``max_tokens`` sampled ids; an end-of-turn token is yielded last."""
    check_prompt(model, prompt)
    draws = PositionDraws(sampling.seed)
    seq = model.new_sequence()
    try:
        logits = model.extend(seq, prompt, last_only=True)[-1]
        for i in range(max_tokens):
            token = sample_at(probs_from_logits(logits, sampling), draws.uniform(len(prompt) + i))
            yield token
            if token in model.eos_ids or len(seq) + 1 >= model.n_ctx:
                return
            logits = model.extend(seq, [token])[-1]
    finally:
        model.release(seq)


def stream_generate(
    model: SteerableModel,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    sampling: SamplingParams = GREEDY,
) -> Generator[Response, None, None]:
    """Responses with text deltas; the last one carries ``finish_reason``."""
    if max_tokens < 1:
        raise ConfigError(f"max_tokens must be at least 1, got {max_tokens}")
    stats = GenerationStats(prompt_tokens=len(prompt))
    detok = IncrementalDetokenizer(model.detokenize)
    tokens: list[int] = []
    finish = "length"
    for token in generate_tokens(model, prompt, max_tokens=max_tokens, sampling=sampling):
        if token in model.eos_ids:
            finish = "stop"
            break
        tokens.append(token)
        stats.token()
        yield Response(detok.push(token), token, tokens, stats)
    yield Response(detok.flush(), None, tokens, stats, finish_reason=finish)


def generate(
    model: SteerableModel,
    prompt: Sequence[int],
    *,
    max_tokens: int,
    sampling: SamplingParams = GREEDY,
) -> Response:
    """Generate to the end; the returned response's ``text`` is the whole output."""
    *_, last = stream_generate(model, prompt, max_tokens=max_tokens, sampling=sampling)
    return Response(model.detokenize(last.tokens), None, last.tokens, last.stats, last.finish_reason)
