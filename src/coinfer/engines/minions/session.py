"""The local–remote protocols on the engine contract (``coinfer.decoding.engine``): parts
``local`` (the chat model that reads the documents) and ``remote`` (the one that plans and
answers, and never sees them); the config picks the protocol (``MinionsConfig``: MinionS,
``MinionConfig``, ``RagConfig``, ``DirectConfig``). A request brings its question and its
documents; what it is billed is the remote's usage."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping
from typing import Any

from coinfer.decoding.engine import Engine, Request, Session
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import Response
from coinfer.engines.minions.baselines import DirectConfig
from coinfer.engines.minions.engine import stream
from coinfer.engines.minions.minion import MinionConfig
from coinfer.engines.minions.minions import MinionsConfig
from coinfer.engines.minions.rag import RagConfig
from coinfer.errors import ConfigError

__all__ = ["ENGINE", "MinionsEngine"]


class _MinionsSession(Session):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.local, self.remote = parts.get("local"), parts.get("remote")

    @property
    def draft_label(self) -> str | None:
        return None if self.local is None else str(self.local.name)

    def stream(self, request: Request) -> Generator[Response, None, None]:
        return stream(self.question_of(request), list(request.documents), local=self.local,
                      remote=self.remote, config=self.config)  # fmt: skip

    def billed(self, last: Response) -> dict[str, Any] | None:
        usage = last.extras.get("usage", {}).get("remote")
        return dict(usage) if usage else None


class MinionsEngine(Engine):
    name = "minions"
    session_type = _MinionsSession
    summary = "a local model reads private documents for a remote model that never sees them"
    config_type = MinionsConfig
    config_types = (MinionConfig, RagConfig, DirectConfig)
    parts = ()
    optional_parts = ("local", "remote")
    needs_documents = True
    needs_remote = True
    answers = True

    def config_from(self, knobs: Mapping[str, Any]) -> Any:
        """The protocol's config: ``protocol`` names it (minions, the default, or minion)."""
        kinds = {"minions": MinionsConfig, "minion": MinionConfig}
        kind = kinds.get(knobs.get("protocol", "minions"))
        if kind is None:
            raise ConfigError(f"unknown protocol {knobs['protocol']!r}", hint="minions or minion")
        names = {f.name for f in dataclasses.fields(kind)}
        return kind(**{k: v for k, v in knobs.items() if k in names})


ENGINE = MinionsEngine()
