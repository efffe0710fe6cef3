"""The top-level package: what a user's first program imports."""

from __future__ import annotations

import subprocess
import sys

import coinfer


def test_every_name_in_all_resolves() -> None:
    for name in coinfer.__all__:
        assert getattr(coinfer, name) is not None, name
    assert coinfer.collective.generate and coinfer.minions.generate and coinfer.generate
    namespace: dict[str, object] = {}
    exec("from coinfer import *", namespace)
    assert set(coinfer.__all__) <= set(namespace)


def test_each_engine_exports_the_convention() -> None:
    """A frozen keyword-only Config, ``stream`` and ``generate`` in every engine (and the
    speculative core)."""
    import dataclasses

    for config, module in (
        (coinfer.SpecConfig, coinfer),
        (coinfer.collective.CollectiveConfig, coinfer.collective),
        (coinfer.llmcad.LLMCadConfig, coinfer.llmcad),
        (coinfer.minions.MinionsConfig, coinfer.minions),
        (coinfer.dragon.DragonConfig, coinfer.dragon),
        (coinfer.jupiter.JupiterConfig, coinfer.jupiter),
    ):
        frozen = config.__dataclass_params__.frozen  # type: ignore[attr-defined]
        assert dataclasses.is_dataclass(config) and frozen, config
        assert all(f.kw_only for f in dataclasses.fields(config)), config
        assert callable(module.stream) and callable(module.generate)


def test_every_engine_is_reached_through_the_registry() -> None:
    """The seven engines by name, each declaring its config, parts and capabilities."""
    names = coinfer.engines.names()
    assert names[:7] == ["plain", "speculative", "collective", "llmcad", "minions", "dragon", "jupiter"]
    for name in names[:7]:
        engine = coinfer.engines.get(name)
        assert engine.name == name and isinstance(engine.lossless, bool) and engine.summary
        assert isinstance(engine.config(), engine.config_type)


def test_importing_coinfer_loads_no_engine() -> None:
    """``import coinfer`` stays light (the CLI's ``models list`` starts fast); names load on use."""
    code = "import coinfer, sys; print(sorted(m for m in sys.modules if m.startswith(('coinfer.', 'numpy'))))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "['coinfer.errors']", loaded
