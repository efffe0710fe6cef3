"""DRAGON on the engine contract (``coinfer.decoding.engine``): parts ``model`` (this
device's) and ``corpus`` (its private documents, retrieved per question), and optionally
the ``cloud`` (a ``CloudLink``) with a ``channel`` kept open for every request. A session
keeps the device's documents' caches across its answers (``keep_documents``).

A session answers up to ``max_batch`` questions at once (``concurrent``), each on its own
thread and its own stream to the cloud: the device model is shared as a ``SharedModel``,
so the documents' rows of every answer in flight are decoded in one batch per step."""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from coinfer.decoding.engine import Engine, Request, Session
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import Response
from coinfer.engines.dragon.config import DragonConfig
from coinfer.engines.dragon.engine import stream
from coinfer.models.shared import SharedModel

__all__ = ["ENGINE", "DragonEngine"]


class _DragonSession(Session):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.model, self.corpus = parts["model"], parts["corpus"]
        self.cloud, self.channel = parts.get("cloud"), parts.get("channel")
        self.width = config.max_batch
        if self.width > 1:
            self.model = SharedModel(self.model)

    def concurrent(self) -> int:
        return self.width

    def stream(self, request: Request) -> Generator[Response, None, None]:
        question, config = self.question_of(request), self.configured(request)
        corpus = self.corpus

        def documents() -> list[Any]:  # retrieved when the device starts, beside the cloud's
            return list(corpus.retrieve(question, config.top_k, how=config.retrieval,
                                        temperature=config.relevance_temperature))  # fmt: skip

        rescore = corpus.rescorer(question, temperature=config.relevance_temperature)
        return stream(self.model, question, documents=documents, config=config, cloud=self.cloud,
                      channel=self.channel, rescore=rescore, learned=self.learned)  # fmt: skip


class DragonEngine(Engine):
    name = "dragon"
    session_type = _DragonSession
    summary = "device and cloud retrieve from their own corpora; their distributions are mixed"
    config_type = DragonConfig
    parts = ("model", "corpus")
    optional_parts = ("cloud", "channel")
    needs_remote = True
    answers = True


ENGINE = DragonEngine()
