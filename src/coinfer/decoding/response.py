"""What every engine yields: ``Response`` objects carrying one ``DecodeStats``.

An engine's ``stream`` yields a ``Response`` per step (a round of verification, a
protocol step): the text and token ids it adds, and the request's stats so far; the last
response of a request carries its ``finish_reason``. The engine's blocking call returns
one ``Response`` per request with the whole text and every token. Counts every engine
shares live in ``DecodeStats``; what only one engine has (votes, usage per side, pipeline
records…) goes in ``extras``, which holds JSON data. The CLI, the server and the
benchmarks read only these two types.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.errors import ConfigError

__all__ = ["DecodeStats", "Response", "Responder", "collect"]


@dataclass
class DecodeStats:
    """Counts and timings of one request; times in seconds (``time.perf_counter``).

    ``target_forwards`` counts the target's forwards for this request, the prefill
    included; ``rounds`` those after it (verifications: plain decoding has one per token
    after the first). ``drafted`` draft tokens were verified and ``accepted`` kept.
    """

    prompt_tokens: int = 0
    cached_tokens: int = 0  # of the prompt tokens, those a cache of an earlier request held
    n_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    target_forwards: int = 0
    start: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    last_token_at: float | None = None
    # seconds between the first token and the last that the engine spent reading other
    # requests' prompts (a batch's joins stall every running request)
    stalled_s: float = 0.0
    # seconds per phase over the rounds after the prefill, where the engine splits them
    # (the speculative engine: draft, forward, logits, accept, policy, detok)
    phases: dict[str, float] = field(default_factory=dict)
    # tokens each model read and wrote, by side, where an engine's answer comes from more
    # than one model (MinionS: local and remote; DRAGON: device and cloud)
    by_side: dict[str, dict[str, Any]] = field(default_factory=dict)

    def prefilled(self) -> None:
        """The target read the prompt."""
        self.target_forwards += 1

    def verified(self, drafted: int, accepted: int) -> None:
        """One verification: ``drafted`` draft tokens sent to the target, ``accepted`` kept."""
        self.target_forwards += 1
        self.rounds += 1
        self.drafted += drafted
        self.accepted += accepted

    def emitted(self, n: int) -> None:
        """``n`` tokens of output arrived now."""
        if n <= 0:
            return
        now = time.perf_counter()
        self.n_tokens += n
        self.first_token_at = self.first_token_at or now
        self.last_token_at = now

    def timed(self, phases: Mapping[str, float]) -> None:
        """Add one round's seconds per phase."""
        for phase, seconds in phases.items():
            self.phases[phase] = self.phases.get(phase, 0.0) + seconds

    def snapshot(self) -> DecodeStats:
        out = copy.copy(self)
        out.phases = dict(self.phases)
        out.by_side = {side: dict(counts) for side, counts in self.by_side.items()}
        return out

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
        """Decode only: tokens after the first over the time from the first to the last."""
        if self.n_tokens < 2 or self.first_token_at is None or self.last_token_at is None:
            return 0.0
        span = self.last_token_at - self.first_token_at
        return (self.n_tokens - 1) / span if span > 0 else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per verification: 1 + accepted / rounds (the target's own token included)."""
        return 1.0 + self.accepted / self.rounds if self.rounds else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "n_tokens": self.n_tokens,
            "ttft_s": round(self.ttft_s, 4),
            "total_s": round(self.total_s, 4),
            "tokens_per_s": round(self.tokens_per_s, 3),
            "decode_tokens_per_s": round(self.decode_tokens_per_s, 3),
            "rounds": self.rounds,
            "target_forwards": self.target_forwards,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "mean_accepted_length": round(self.mean_accepted_length, 3),
            "acceptance_rate": round(self.acceptance_rate, 3),
        }
        if self.by_side:
            out["by_side"] = {side: dict(counts) for side, counts in self.by_side.items()}
        return out


@dataclass
class Response:
    """One step of a stream, or (from a blocking call) a whole request.

    ``text`` and ``tokens``: what this step adds (the whole output from a blocking call);
    ``request``: the index of the prompt it answers (batch engines); ``stats``: the
    request's stats up to this step; ``finish_reason`` on a request's last response:
    ``stop`` (an end-of-turn token or the answer), ``length`` (the token budget or the
    context window) or ``interrupted``.
    """

    text: str
    tokens: list[int]
    stats: DecodeStats
    finish_reason: str | None = None
    request: int = 0
    extras: dict[str, Any] = field(default_factory=dict)


class Responder:
    """A request's rounds into ``Response`` objects, the one way every engine does it: the
    first round is the prompt's read, every later one a verification of ``drafted`` draft
    tokens of which ``accepted`` were kept; an end-of-generation token is never output (nor
    anything after it); ``n_tokens`` counts the tokens output; the text comes through one
    incremental detokenizer, flushed on the last round; a verification's seconds per phase
    (and the detokenizer's, as ``detok``) go into the stats."""

    def __init__(
        self,
        detokenize: Callable[[Sequence[int]], str],
        *,
        prompt_tokens: int = 0,
        eos_ids: Iterable[int] = (),
        stats: DecodeStats | None = None,
    ) -> None:
        self.stats = stats if stats is not None else DecodeStats(prompt_tokens=prompt_tokens)
        self.detok = IncrementalDetokenizer(detokenize)
        self.eos = frozenset(eos_ids)

    def step(
        self,
        tokens: Iterable[int],
        *,
        drafted: int = 0,
        accepted: int = 0,
        finish: str | None = None,
        phases: Mapping[str, float] | None = None,
        extras: dict[str, Any] | None = None,
    ) -> Response:
        """The response for one round: its tokens (cut at an end-of-generation token) and
        ``finish`` (None until the last round)."""
        out = self._cut(tokens)
        t0 = time.perf_counter()
        text = self._text(out, finish)
        if self.stats.target_forwards:
            self.stats.verified(drafted, accepted)
            if phases is not None:
                self.stats.timed({**phases, "detok": time.perf_counter() - t0})
        else:
            self.stats.prefilled()
        self.stats.emitted(len(out))
        return Response(text, out, self.stats.snapshot(), finish, extras=extras if extras is not None else {})

    def report(
        self, tokens: Iterable[int], *, finish: str | None = None, request: int = 0,
        extras: dict[str, Any] | None = None,
    ) -> Response:  # fmt: skip
        """The response for tokens whose rounds the engine counted into ``stats`` itself
        (a batch engine's rounds count every request's at once): cut, detokenized, the
        stats as they stand."""
        out = self._cut(tokens)
        extras = extras if extras is not None else {}
        return Response(self._text(out, finish), out, self.stats.snapshot(), finish, request, extras)

    def _cut(self, tokens: Iterable[int]) -> list[int]:
        out: list[int] = []
        for t in tokens:
            if t in self.eos:
                break
            out.append(int(t))
        return out

    def _text(self, out: list[int], finish: str | None) -> str:
        return "".join(self.detok.push(t) for t in out) + (self.detok.flush() if finish else "")


def collect(responses: Iterable[Response], detokenize: Callable[[list[int]], str] | None) -> Response:
    """A stream of one request gathered into one ``Response``: every token, the whole text
    (detokenized at once; joined, for an engine that answers in text alone: ``None``), and
    the last step's stats, finish reason and extras."""
    tokens: list[int] = []
    texts: list[str] = []
    last = None
    for last in responses:
        tokens += last.tokens
        texts.append(last.text)
    if last is None:
        raise ConfigError("the stream ended without a response")
    text = "".join(texts) if detokenize is None else detokenize(tokens)
    return Response(text, tokens, last.stats, last.finish_reason, extras=last.extras)
