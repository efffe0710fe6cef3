"""The registry: coinfer's seven engines and any a package registers under the entry-point
group ``coinfer.engines``, by name; ``open`` checks parts and config before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

import coinfer
from coinfer.decoding.engine import Request
from coinfer.errors import ConfigError
from coinfer.testing import ScriptedModel
from tests.decoding.echo_engine import EchoConfig, registered_echo

SEVEN = ["plain", "speculative", "collective", "llmcad", "minions", "dragon", "jupiter"]


def test_the_registry_lists_the_seven_and_an_engine_another_package_registers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert coinfer.engines.names() == SEVEN
    with registered_echo(tmp_path, monkeypatch):
        assert coinfer.engines.names() == [*SEVEN, "echo"]
        engine = coinfer.engines.get("echo")
        model = ScriptedModel(lambda prefix: 0)
        with engine.open({"target": model}, EchoConfig(max_tokens=3)) as session:
            out = session.generate(Request(prompt=[70, 71, 72, 73]))
        assert out.tokens == [73, 72, 71] and out.text == "IHG"
    assert coinfer.engines.names() == SEVEN  # gone with its package


def test_an_unknown_engine_names_the_ones_there_are() -> None:
    with pytest.raises(ConfigError) as info:
        coinfer.engines.get("medusa")
    assert "no engine named 'medusa'" in str(info.value) and "llmcad" in (info.value.hint or "")


def test_an_entry_point_that_is_no_engine_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    not_an_engine = "tests.decoding.echo_engine:EchoConfig"
    with (
        registered_echo(tmp_path, monkeypatch, value=not_an_engine),
        pytest.raises(ConfigError, match="not an"),
    ):
        coinfer.engines.get("echo")


def test_open_checks_parts_and_config_before_any_work() -> None:
    engine = coinfer.engines.get("llmcad")
    model = ScriptedModel(lambda prefix: 0)
    with pytest.raises(ConfigError, match="missing draft_model"):
        engine.open({"target": model})
    with pytest.raises(ConfigError, match="no part named drafts"):
        engine.open({"target": model, "draft_model": model, "drafts": []})
    with pytest.raises(ConfigError, match="takes a LLMCadConfig"):
        engine.open({"target": model, "draft_model": model}, EchoConfig())
    with pytest.raises(ConfigError, match="its knobs"):
        engine.config(temperatur=0.3)
    assert model.forwards == []
