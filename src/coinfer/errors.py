"""The one exception tree of coinfer.

Every error a user can cause or meet is a ``CoinferError``; its message says what to do.
Third-party exceptions are translated where they enter (``raise X(...) from exc``).

    CoinferError
    ├── ConfigError           a setting or argument is invalid
    ├── ModelError            a model cannot be found, assembled, loaded or run
    │   ├── UnknownModelError     a name that is not in the catalogue and not a path
    │   ├── MissingDependencyError an optional extra is not installed
    │   ├── IntegrityError        an assembled file's sha256 differs from the catalogue's
    │   ├── ContextOverflowError  a prompt longer than the context window
    │   └── SequenceError         a sequence handle used against its contract
    ├── ProtocolError         a local–remote protocol broke its contract
    ├── TransportError        a message between processes failed
    │   └── DeviceLostError       a device of a pipeline died mid-run
    └── SandboxError          code from a remote model was refused or failed
"""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "CoinferError",
    "ConfigError",
    "ContextOverflowError",
    "DeviceLostError",
    "IntegrityError",
    "MissingDependencyError",
    "ModelError",
    "ProtocolError",
    "SandboxError",
    "SequenceError",
    "TransportError",
    "UnknownModelError",
]


class CoinferError(Exception):
    """Base of every coinfer error. ``hint`` is a one-line suggestion for the user."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base}\nhint: {self.hint}" if self.hint else base


class ConfigError(CoinferError):
    """A setting or argument is invalid."""


class ModelError(CoinferError):
    """A model cannot be found, assembled, loaded or run."""


class UnknownModelError(ModelError):
    """A model spec that is neither a catalogue name, a file, a directory nor a Hub id."""


class MissingDependencyError(ModelError):
    """An optional dependency (an install extra) is missing."""

    def __init__(self, what: str, extra: str) -> None:
        super().__init__(
            f"{what} is not installed",
            hint=f"install the `{extra}` extra: pip install 'coinfer[{extra}]'",
        )
        self.extra = extra


class IntegrityError(ModelError):
    """An assembled model file whose sha256 is not the catalogue's."""


class ContextOverflowError(ModelError):
    """A prompt that does not fit the context window."""


class SequenceError(ModelError):
    """A ``Seq`` used against the steerable-model contract: released, another model's or
    another backend's, extended while a token tree is pending, rolled back past its start,
    or committed along a path its tree does not have."""


class ProtocolError(CoinferError):
    """A local–remote protocol broke its contract."""


class TransportError(CoinferError):
    """A framed message between processes failed."""


class DeviceLostError(TransportError):
    """A device of a pipeline died or left mid-run (the message names it)."""


class BudgetError(CoinferError):
    """A memory budget that cannot be enforced here (no memory cgroup can be made), or
    that leaves a model too little memory to run in."""


class SandboxError(CoinferError):
    """Code written by a remote model was refused or failed in the sandbox.

    ``kind``: ``refused`` (it uses something not allowed), ``error`` (it raised),
    ``timeout``, ``memory``, ``output`` (too much printed or returned) or ``crashed``.
    """

    def __init__(self, message: str, *, kind: str = "error", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.kind = kind
