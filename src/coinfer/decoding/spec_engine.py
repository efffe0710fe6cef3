"""The speculative engine and plain decoding on the engine contract (``decoding.engine``).

``speculative``: a drafter proposes, the target verifies (``speculative.stream``); its
parts are the ``target`` and an optional ``draft`` (a ``Drafter``; absent: n-gram prompt
lookup, a fresh one per request). ``plain``: the target alone, one token per forward.
A session keeps the target's measured cost curve across its requests. Given the part
``chat`` (a ``LocalChat`` over the target), the server batches either through it; the
speculative session's ``speculator`` drafts inside that batch
(``decoding.batch_speculation``).
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any, ClassVar

from coinfer.decoding.batch_speculation import BatchSpeculator
from coinfer.decoding.draft_length import DraftSizer, FixedDraftLength
from coinfer.decoding.engine import Engine, Request, Session
from coinfer.decoding.heads_drafter import HeadsDrafter
from coinfer.decoding.learned import Learned
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.response import Response
from coinfer.decoding.speculative import SpecConfig, stream, target_costs

__all__ = ["PLAIN", "SPECULATIVE", "PlainEngine", "SpeculativeEngine"]


class _SpecSession(Session):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.model, self.draft = parts["target"], parts.get("draft", "auto")
        self._speculator: BatchSpeculator | None = None

    def speculator(self) -> BatchSpeculator | None:
        """The drafter inside a server's batch: the session's draft (``auto``: n-gram
        prompt lookup, one for every request), sized over the target's cost curve (or at
        the config's fixed length); None without a draft, or with draft heads, which read
        the target's hidden states and draft one request at a time."""
        if self.draft is None or isinstance(self.draft, HeadsDrafter):
            return None
        if self._speculator is None:
            drafter = NgramDrafter() if self.draft == "auto" else self.draft
            k = self.config.draft_tokens
            if k == "auto":
                costs = target_costs(self.model, self.learned)
                self._speculator = BatchSpeculator.over(drafter, costs, batch_floor=self.config.batch_floor)
            else:
                self._speculator = BatchSpeculator(drafter, DraftSizer(FixedDraftLength(int(k))))
        return self._speculator

    @property
    def draft_label(self) -> str | None:
        if self.draft is None:
            return None
        return "ngram" if self.draft == "auto" else str(self.draft.name)

    def stream(self, request: Request) -> Generator[Response, None, None]:
        config = self.configured(request)
        return stream(
            self.model, self.prompt_of(request), draft=self.draft, config=config, learned=self.learned
        )


class _PlainSession(_SpecSession):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.draft = None  # the target alone


class SpeculativeEngine(Engine):
    name = "speculative"
    session_type = _SpecSession
    summary = "a drafter proposes, the target verifies in one forward; lossless"
    config_type = SpecConfig
    parts = ("target",)
    # the chat: a LocalChat over the target, the server's batch
    optional_parts: ClassVar[tuple[str, ...]] = ("chat", "draft")
    batches = True
    lossless = True


class PlainEngine(SpeculativeEngine):
    name = "plain"
    session_type = _PlainSession
    summary = "the target alone, one token per forward; the server batches requests"
    optional_parts = ("chat",)  # a LocalChat over the target: the server batches through it


SPECULATIVE = SpeculativeEngine()
PLAIN = PlainEngine()
