"""The speculative engine and plain decoding on the engine contract (``decoding.engine``).

``speculative``: a drafter proposes, the target verifies (``speculative.stream``); its
parts are the ``target`` and an optional ``draft`` (a ``Drafter``; absent: n-gram prompt
lookup, a fresh one per request). ``plain``: the target alone, one token per forward.
A session keeps the target's measured cost curve across its requests.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from coinfer.decoding.engine import Engine, Request, Session
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import Response
from coinfer.decoding.speculative import SpecConfig, stream

__all__ = ["PLAIN", "SPECULATIVE", "PlainEngine", "SpeculativeEngine"]


class _SpecSession(Session):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.model, self.draft = parts["target"], parts.get("draft", "auto")

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
    optional_parts = ("draft",)
    lossless = True


class PlainEngine(SpeculativeEngine):
    name = "plain"
    session_type = _PlainSession
    summary = "the target alone, one token per forward; the server batches requests"
    optional_parts = ("chat",)  # a LocalChat over the target: the server batches through it
    batches = True


SPECULATIVE = SpeculativeEngine()
PLAIN = PlainEngine()
