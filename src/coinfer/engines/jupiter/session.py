"""Jupiter on the engine contract (``coinfer.decoding.engine``): the part ``cluster`` is a
started ``EdgeCluster`` (its devices joined; ``start_local_cluster`` starts one). Plain
and self-drafting decoding continue the request's prompt; outline and auto decoding
answer its question."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from coinfer.decoding.engine import Engine, Request, Session
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import Response
from coinfer.engines.jupiter.engine import JupiterConfig, stream

__all__ = ["ENGINE", "JupiterEngine"]

_ASKING = ("outline", "auto")  # decodings that read the question itself


class _JupiterSession(Session):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.cluster = parts["cluster"]
        self.model = self.cluster.text

    @property
    def window(self) -> int | None:
        return int(self.cluster.n_ctx)

    @property
    def answers(self) -> bool:
        return bool(self.config.decode in _ASKING)

    @property
    def draft_label(self) -> str | None:
        return "heads" if self.cluster.heads is not None else None

    def stream(self, request: Request) -> Generator[Response, None, None]:
        config = self.configured(request)
        if self.answers:
            return stream(self.cluster, self.question_of(request), config=config, system=request.system)
        return stream(self.cluster, self.prompt_of(request), config=config)


class JupiterEngine(Engine):
    name = "jupiter"
    session_type = _JupiterSession
    summary = "several edge devices serve one model as a planned pipeline"
    config_type = JupiterConfig
    parts = ("cluster",)
    lossless = True  # plain and self-drafting decoding; outline decoding answers otherwise


ENGINE = JupiterEngine()
