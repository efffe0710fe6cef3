"""Collective decoding on the engine contract (``coinfer.decoding.engine``): parts
``target`` and ``drafts`` (the drafters that vote); a session keeps the target's cost
curve, split judges and gate memory across its requests, and runs a batch that requests
join and leave (``run``) for the server."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from dataclasses import replace
from typing import Any

from coinfer.decoding.engine import Arrivals, BatchSession, Engine, Request
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.engines.collective.config import CollectiveConfig
from coinfer.engines.collective.engine import stream

__all__ = ["ENGINE", "CollectiveEngine", "CollectiveSession"]


class CollectiveSession(BatchSession):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.model, self.drafts = parts["target"], list(parts["drafts"])

    @property
    def batching(self) -> bool:
        return not self.config.pipeline  # the pipeline runs one call's requests at a time

    @property
    def draft_label(self) -> str | None:
        return ",".join(d.name for d in self.drafts) or None

    def stream(self, request: Request) -> Generator[Response, None, None]:
        config = self.configured(request)
        return stream(self.model, [self.prompt_of(request)], drafts=self.drafts, config=config,
                      learned=self.learned)  # fmt: skip

    def run(self, arrivals: Arrivals, sampling: SamplingParams) -> Iterator[Response]:
        """One batch that requests join and leave as it runs (``arrivals``), all sampling
        alike; each response's ``request`` is the key it joined with."""
        config = replace(self.config, sampling=sampling)
        return stream(
            self.model, [], drafts=self.drafts, config=config, arrivals=arrivals, learned=self.learned
        )


class CollectiveEngine(Engine):
    name = "collective"
    session_type = CollectiveSession
    summary = "several drafts vote, the draft length adapts, requests batch; lossless"
    config_type = CollectiveConfig
    parts = ("target", "drafts")
    batches = True
    lossless = True


ENGINE = CollectiveEngine()
