"""Jupiter on the engine contract (``coinfer.decoding.engine``): the part ``cluster`` is a
started ``EdgeCluster`` (its devices joined; ``start_local_cluster`` starts one). Plain
and self-drafting decoding continue the request's prompt; outline and auto decoding
answer its question. A server's plain decoding puts ``max_batch`` requests in the
pipeline at once (``run``, ``interleave``)."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from dataclasses import replace
from typing import Any

from coinfer.decoding.engine import Arrivals, BatchSession, Engine, Request
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.engines.jupiter.engine import JupiterConfig, stream, stream_batch

__all__ = ["ENGINE", "JupiterEngine"]

_ASKING = ("outline", "auto")  # decodings that read the question itself


class _JupiterSession(BatchSession):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.cluster = parts["cluster"]
        self.model = self.cluster.text

    @property
    def window(self) -> int | None:
        return int(self.cluster.n_ctx)

    @property
    def batching(self) -> bool:
        """Whether a server puts several requests in the pipeline at once: plain decoding
        on dynamic caches, ``max_batch`` above 1."""
        config = self.config
        return bool(config.max_batch > 1 and config.decode == "naive" and self.cluster.kv == "dynamic")

    def run(self, arrivals: Arrivals, sampling: SamplingParams) -> Iterator[Response]:
        """The requests of ``arrivals`` through the pipeline, ``max_batch`` at once."""
        return stream_batch(self.cluster, arrivals, replace(self.config, sampling=sampling))

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
