"""What an engine learns about its models while it runs, held by one object that is passed
in explicitly: never a module global.

An engine's ``Session`` owns a ``Learned``: the target's verification cost curve (the
speculative engine's draft-length policy), the collective gates' memory and split judges,
LLMCad's forward costs, DRAGON's document caches. Each is kept per model object and made
on first use, so what one request measured serves the next request of the same session.
Two sessions are independent unless they are given the same ``Learned``.

    learned = Learned()
    curve = learned.of(target, "costs", CostCurve)   # made once, then the same object
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

__all__ = ["Learned", "learned_or_new"]

T = TypeVar("T")


@runtime_checkable
class _Holds(Protocol):
    """Learned state that holds a model's resources (DRAGON's kept documents' sequences)."""

    def close(self) -> None: ...


class Learned:
    """Learned state by model and kind; a model's entries go when the model object does."""

    def __init__(self) -> None:
        self._by_model: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self._making = threading.RLock()  # requests served at once on threads make each state once

    def of(self, model: Any, kind: str, make: Callable[[], T]) -> T:
        """``model``'s state of ``kind``, made by ``make()`` the first time it is asked for."""
        with self._making:
            kinds = self._by_model.setdefault(model, {})
            if kind not in kinds:
                kinds[kind] = make()
            value: T = kinds[kind]
        return value

    def known(self, model: Any, kind: str) -> bool:
        """Whether ``model``'s state of ``kind`` has been made."""
        return kind in self._by_model.get(model, {})

    def forget(self, model: Any | None = None) -> None:
        """Forget what was learned about ``model`` (None: about every model), freeing what
        it held of the model's resources."""
        models = list(self._by_model) if model is None else [model]
        for m in models:
            for value in self._by_model.pop(m, {}).values():
                if isinstance(value, _Holds):
                    value.close()

    def close(self) -> None:
        """Forget everything (a session's end)."""
        self.forget()


def learned_or_new(learned: Learned | None) -> Learned:
    """The caller's ``Learned``, or a fresh one that lives as long as the call."""
    return Learned() if learned is None else learned
