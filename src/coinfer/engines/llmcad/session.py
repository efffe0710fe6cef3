"""LLMCad on the engine contract (``coinfer.decoding.engine``): parts ``target`` and its
memory-resident ``draft_model`` (of the target's vocabulary); a session keeps both
models' measured forward costs across its requests.

A session answers up to ``max_batch`` requests at once (``concurrent``), each on its own
thread, both models shared as ``SharedModel``: the trees several requests verify in one
step go to the target as one batch, as do the draft's forwards that grow their trees."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from coinfer.decoding.engine import Engine, Request, Session
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import Response
from coinfer.engines.llmcad.config import LLMCadConfig
from coinfer.engines.llmcad.engine import stream
from coinfer.models.shared import SharedModel

__all__ = ["ENGINE", "LLMCadEngine"]


class _LLMCadSession(Session):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.model, self.draft = parts["target"], parts["draft_model"]
        self.width = config.max_batch if config.memory_budget is None else 1
        if self.width > 1:
            self.model, self.draft = SharedModel(self.model), SharedModel(self.draft)

    def concurrent(self) -> int:
        return self.width

    @property
    def draft_label(self) -> str | None:
        return str(self.draft.name)

    def stream(self, request: Request) -> Generator[Response, None, None]:
        config = self.configured(request)
        return stream(
            self.model, self.prompt_of(request), draft=self.draft, config=config, learned=self.learned
        )


class LLMCadEngine(Engine):
    name = "llmcad"
    session_type = _LLMCadSession
    summary = "a resident draft's token trees, verified when its confidence runs low; lossless"
    config_type = LLMCadConfig
    parts = ("target", "draft_model")
    lossless = True


ENGINE = LLMCadEngine()
