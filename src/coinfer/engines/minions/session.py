"""The local–remote protocols on the engine contract (``coinfer.decoding.engine``): parts
``local`` (the chat model that reads the documents) and ``remote`` (the one that plans and
answers, and never sees them); the config picks the protocol (``MinionsConfig``: MinionS,
``MinionConfig``, ``RagConfig``, ``DirectConfig``). A request brings its question and its
documents; what it is billed is the remote's usage.

Several questions at once: each runs on its own thread (``concurrent``), and a local
model's ``LocalChat`` is shared by them through one batch (``SharedChat``), so the local
jobs of every question in flight are decoded together and one question's remote call
overlaps the others' local work. An OpenAI-compatible client is shared as it is."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping
from typing import Any

from coinfer.chat import LocalChat, OpenAIChat, SharedChat
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
        self.local, self.remote = _shared(parts.get("local")), _shared(parts.get("remote"))

    @property
    def draft_label(self) -> str | None:
        return None if self.local is None else str(self.local.name)

    def stream(self, request: Request) -> Generator[Response, None, None]:
        return stream(self.question_of(request), list(request.documents), local=self.local,
                      remote=self.remote, config=self.config)  # fmt: skip

    def concurrent(self) -> int:
        """As many questions as the local batch holds, where every part may be called from
        several threads (a shared batch, an API client); else one at a time."""
        sides = [p for p in (self.local, self.remote) if p is not None]
        if not sides or not all(isinstance(p, (SharedChat, OpenAIChat)) for p in sides):
            return 1
        return min(p.max_concurrent if isinstance(p, SharedChat) else p.concurrency for p in sides)

    def billed(self, last: Response) -> dict[str, Any] | None:
        usage = last.extras.get("usage", {}).get("remote")
        return dict(usage) if usage else None

    def close(self) -> None:
        for side in (self.local, self.remote):
            if isinstance(side, SharedChat):
                side.close()  # its worker; the chat itself is the parts' owner's
        super().close()


def _shared(part: Any) -> Any:
    """A ``LocalChat`` behind one batch that several threads share; anything else as it is."""
    return SharedChat(part) if isinstance(part, LocalChat) else part


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
