"""The engines by name: every ``Engine`` that an installed package registers under the
entry-point group ``coinfer.engines`` (coinfer's own seven among them).

A package outside coinfer adds an engine by declaring, in its ``pyproject.toml``::

    [project.entry-points."coinfer.engines"]
    myengine = "mypackage.engine:ENGINE"      # an Engine instance (or its class)

``names()`` lists them without importing any; ``get(name)`` imports only the one asked for.
Nothing is cached: a package installed while a process runs is seen by its next call.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

from coinfer.decoding.engine import Engine
from coinfer.errors import ConfigError

__all__ = ["GROUP", "all_engines", "get", "names"]

GROUP = "coinfer.engines"
# coinfer's own, in the order the CLI lists them; others follow by name
_FIRST = ("plain", "speculative", "collective", "llmcad", "minions", "dragon", "jupiter")


def _entry_points() -> dict[str, EntryPoint]:
    found: dict[str, EntryPoint] = {}
    for ep in entry_points(group=GROUP):
        found.setdefault(ep.name, ep)  # the first on sys.path wins, as imports do
    return found


def names() -> list[str]:
    """Every registered engine's name: coinfer's own first, then the rest by name."""
    found = _entry_points()
    return [n for n in _FIRST if n in found] + sorted(set(found) - set(_FIRST))


def get(name: str) -> Engine:
    """The engine registered as ``name`` (``ConfigError`` naming the others if none is)."""
    ep = _entry_points().get(name)
    if ep is None:
        known = names()
        raise ConfigError(
            f"no engine named {name!r}",
            hint=f"choose one of {', '.join(known)}" if known else "reinstall coinfer: pip install -e .",
        )
    engine = ep.load()
    engine = engine() if isinstance(engine, type) else engine
    if not isinstance(engine, Engine) or engine.name != name:
        raise ConfigError(
            f"the entry point {ep.value} registered as {name!r} is not an Engine named {name!r}",
            hint="an entry point of group coinfer.engines must name an Engine instance or class",
        )
    return engine


def all_engines() -> list[Engine]:
    """Every registered engine, loaded, in ``names()``'s order."""
    return [get(n) for n in names()]
