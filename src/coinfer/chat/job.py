"""A chat job: one sample of one request in ``LocalChat``'s continuous batch, from its
prompt to its finish (what it has read, output and drafted)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from coinfer.decoding.sampling import PositionDraws, SamplingParams
from coinfer.models.base import Seq, TokenConstraint

__all__ = ["Job", "seq_of"]


@dataclass
class Job:
    """One sample of one request, from its prompt to its finish."""

    request: int
    prompt: list[int]
    max_tokens: int
    params: SamplingParams
    draws: PositionDraws  # the uniform each position of its text is sampled with
    tokens: list[int] = field(default_factory=list)
    finish: str | None = None
    seq: Seq | None = None
    logits: np.ndarray | None = None  # the next token's, once fed
    choice: int | None = None  # instead, where the step read greedy choices: the next token
    unread: int | None = None  # its latest token, output but not yet read by the model
    constraint: TokenConstraint | None = None  # the JSON schema's grammar, where enforced
    key: int = 0  # unique among every job of its chat (a drafter's per-request state)
    speculate: bool = False  # drafts when a step allows (no grammar, a speculator)
    drafted: int = 0  # draft tokens verified for it
    accepted: int = 0  # of them, kept
    verified: int = 0  # forwards that verified a draft of it
    read: int = 0  # prompt tokens in its cache (read, or reused from a kept one)
    cached: int = 0  # of them, reused from a kept cache (a prefix another request read)
    passed: int = 0  # jobs that arrived after it and were admitted first (``chat.admission``)

    @property
    def fed(self) -> bool:
        """Whether the model has read the job's latest tokens (its next token is known)."""
        return self.logits is not None or self.choice is not None

    @property
    def reading(self) -> bool:
        """Whether part of its prompt is still to be read."""
        return self.read < len(self.prompt)

    @property
    def prompt_left(self) -> int:
        """Its prompt tokens still to be read."""
        return len(self.prompt) - self.read

    @property
    def greedy(self) -> bool:
        """Whether the next token is the argmax of the logits alone (no grammar to apply)."""
        return self.params.greedy and self.constraint is None

    @property
    def position(self) -> int:
        """Where its next token goes in the text (prompt included): whose draw samples it."""
        return len(self.prompt) + len(self.tokens)

    @property
    def reserve(self) -> int:
        """Cache cells the job may fill: its prompt and its whole budget."""
        return len(self.prompt) + self.max_tokens


def seq_of(job: Job) -> Seq:
    """A running job's sequence (admitted jobs always have one)."""
    assert job.seq is not None, "a job fed before it was admitted"
    return job.seq
