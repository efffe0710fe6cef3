"""The engine contract, for every registered engine (as ``tests/models/test_contract.py``
is for the backends): opened from the registry over scripted fakes, each one's blocking
call equals its joined stream; its text is its tokens detokenized; no end-of-generation
token is ever output; ``n_tokens`` counts the tokens output; a lossless engine's greedy
text is plain decoding's; a bad config is refused before any model runs; and a stream
closed early gives the model back every sequence it took.

Jupiter's cluster is real processes: its contract runs in ``tests/engines/jupiter``
(``test_a_pipeline_started_from_python_meets_the_engine_contract``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import coinfer
from coinfer.decoding import NgramDrafter
from coinfer.decoding.engine import Request
from coinfer.engines.dragon import Document
from coinfer.errors import ConfigError
from coinfer.testing import EOS, ScriptedChat, ScriptedModel
from tests.decoding.echo_engine import registered_echo
from tests.engines.minions.test_minions import DOC, GOOD_CODE, QUESTION, final_reply, local_reader

ENGINES = ["plain", "speculative", "collective", "llmcad", "minions", "dragon", "echo"]
PROMPT = [72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]  # "Hello, world"


def _text(prefix: list[int]) -> int:
    """A text that repeats (drafts hold) and ends with an end-of-turn token after 30."""
    n = len(prefix) - len(PROMPT)
    return EOS if n >= 30 else 97 + (n * 3) % 7


@dataclass
class Case:
    """An engine opened over fakes: its parts, config knobs, the request, its models."""

    parts: dict[str, Any]
    knobs: dict[str, Any]
    request: Request
    models: list[ScriptedModel] = field(default_factory=list)


class _Corpus:
    def retrieve(self, query: str, k: int, *, how: str, temperature: float) -> list[Document]:
        return [Document("notes", "the port is 8080", 0.0)]

    def rescorer(self, question: str, *, temperature: float) -> Callable[..., np.ndarray]:
        return lambda docs, text: np.zeros(len(docs))


def _case(name: str) -> Case:
    model = ScriptedModel(_text, n_ctx=256)
    ask = Request(prompt=PROMPT, max_tokens=40)
    if name in ("plain", "echo"):
        return Case({"target": model}, {"max_tokens": 40}, ask, [model])
    if name == "speculative":
        return Case({"target": model, "draft": NgramDrafter()}, {"max_tokens": 40}, ask, [model])
    if name == "collective":
        return Case({"target": model, "drafts": [NgramDrafter()]}, {"max_tokens": 40}, ask, [model])
    if name == "llmcad":
        draft = ScriptedModel(_text, n_ctx=256)
        return Case({"target": model, "draft_model": draft}, {"max_tokens": 40}, ask, [model, draft])
    if name == "dragon":
        question = Request(question="Which port?", max_tokens=40)
        return Case({"model": model, "corpus": _Corpus()}, {"max_tokens": 40}, question, [model])
    assert name == "minions"
    remote, local = ScriptedChat([GOOD_CODE, final_reply("8080")]), ScriptedChat(local_reader)
    request = Request(question=QUESTION, documents=[("config.md", DOC)])
    return Case({"local": local, "remote": remote}, {}, request)


@pytest.fixture
def registered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    with registered_echo(tmp_path, monkeypatch):
        yield


def _open(name: str, case: Case, **knobs: Any) -> Any:
    engine = coinfer.engines.get(name)
    return engine.open(case.parts, engine.config_from({**case.knobs, **knobs}))


def test_the_suite_covers_every_registered_engine(registered: None) -> None:
    assert set(coinfer.engines.names()) == {*ENGINES, "jupiter"}


@pytest.mark.parametrize("name", ENGINES)
def test_generate_is_the_joined_stream_and_its_text_its_tokens(registered: None, name: str) -> None:
    streamed, whole = _case(name), _case(name)
    with _open(name, streamed) as session:
        steps = list(session.stream(streamed.request))
    with _open(name, whole) as session:
        out = session.generate(whole.request)
    tokens = [t for r in steps for t in r.tokens]
    assert out.tokens == tokens and out.text == "".join(r.text for r in steps)
    assert steps[-1].finish_reason is not None and all(r.finish_reason is None for r in steps[:-1])
    assert EOS not in tokens
    assert out.stats.n_tokens == len(tokens) == steps[-1].stats.n_tokens
    assert out.stats.prompt_tokens > 0  # what the models read is counted
    if session.model is not None:
        assert out.text == session.model.detokenize(tokens) and tokens
    json.dumps(out.extras)  # JSON data, for --json, the server and the bench


@pytest.mark.parametrize("name", [n for n in ENGINES if n not in ("minions", "dragon", "echo")])
def test_a_lossless_engine_gives_plain_decodings_greedy_text(name: str) -> None:
    engine = coinfer.engines.get(name)
    assert engine.lossless
    with _open(name, _case(name)) as session:
        ours = session.generate(Request(prompt=PROMPT, max_tokens=40))
    with _open("plain", _case("plain")) as session:
        plain = session.generate(Request(prompt=PROMPT, max_tokens=40))
    assert ours.tokens == plain.tokens and ours.finish_reason == plain.finish_reason == "stop"


@pytest.mark.parametrize("name", [*ENGINES, "jupiter"])
def test_a_bad_config_is_refused_before_any_model_runs(registered: None, name: str) -> None:
    engine = coinfer.engines.get(name)
    with pytest.raises(ConfigError, match="its knobs"):
        engine.config(no_such_knob=1)
    if "max_tokens" in {f for f in engine.config_type.__dataclass_fields__}:
        with pytest.raises(ConfigError):
            engine.config(max_tokens=0)
    case = _case(name) if name != "jupiter" else Case({}, {}, Request())
    with pytest.raises(ConfigError):
        engine.open(case.parts, object())
    assert all(m.forwards == [] for m in case.models)


@pytest.mark.parametrize("name", [n for n in ENGINES if n != "minions"])
def test_a_stream_closed_early_gives_back_every_sequence(registered: None, name: str) -> None:
    case = _case(name)
    with _open(name, case) as session:
        stream = session.stream(case.request)
        next(stream)
        next(stream)
        stream.close()  # the client went away after two steps
        assert all(m.live_sequences == 0 for m in case.models)
