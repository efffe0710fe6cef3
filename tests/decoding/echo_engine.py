"""A small engine defined outside coinfer's package, registered through the entry-point
group ``coinfer.engines`` as a third-party package would (``registered_echo``): it answers
with the prompt's tokens, reversed, up to its budget."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.engine import Engine, Request, Session
from coinfer.decoding.learned import Learned
from coinfer.decoding.response import DecodeStats, Response
from coinfer.decoding.sampling import SamplingParams
from coinfer.errors import ConfigError


@dataclass(frozen=True, kw_only=True)
class EchoConfig:
    max_tokens: int = 8
    sampling: SamplingParams = field(default_factory=SamplingParams)

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {self.max_tokens}")


class _EchoSession(Session):
    def __init__(self, engine: Engine, parts: Mapping[str, Any], config: Any, learned: Learned) -> None:
        super().__init__(engine, parts, config, learned)
        self.model = parts["target"]

    def stream(self, request: Request) -> Generator[Response, None, None]:
        config, prompt = self.configured(request), self.prompt_of(request)
        seq = self.model.new_sequence()  # held while the request runs, as a real engine's cache
        try:
            stats, detok = (
                DecodeStats(prompt_tokens=len(prompt)),
                IncrementalDetokenizer(self.model.detokenize),
            )
            out = list(reversed(prompt))[: config.max_tokens]
            for i, token in enumerate(out):
                stats.emitted(1)
                last = i == len(out) - 1
                text = detok.push(token) + (detok.flush() if last else "")
                yield Response(text, [token], stats.snapshot(), "length" if last else None)
        finally:
            self.model.release(seq)


class EchoEngine(Engine):
    name = "echo"
    session_type = _EchoSession
    summary = "the prompt, reversed (a test engine from outside coinfer)"
    config_type = EchoConfig


ENGINE = EchoEngine()


@contextmanager
def registered_echo(
    root: Path, monkeypatch: pytest.MonkeyPatch, value: str = f"{__name__}:ENGINE"
) -> Iterator[None]:
    """An installed distribution, ``coinfer-echo``, whose entry point registers ``value``
    as the engine ``echo``: its metadata on ``sys.path``, as pip would leave it."""
    dist = root / "coinfer_echo-0.1.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: coinfer-echo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[coinfer.engines]\necho = {value}\n")
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(root))
        yield
