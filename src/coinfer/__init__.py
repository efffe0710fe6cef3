"""coinfer: collaborative inference between language models of different sizes.

The main calls, one import away (each loads its layer only when first used, so
``import coinfer`` stays fast)::

    import coinfer

    model = coinfer.load_model("qwen2.5-coder-1.5b")
    print(coinfer.generate(model, "Write quicksort in Python.").text)  # speculative decoding

Every engine follows one convention: a frozen ``Config``, ``stream(...)`` yielding
``Response`` objects with one ``DecodeStats``, and a blocking ``generate(...)``:
``coinfer.generate`` / ``coinfer.stream`` (speculative decoding, ``SpecConfig``),
``coinfer.collective`` (several drafts vote), ``coinfer.llmcad`` (a resident draft's token
trees for a target larger than its memory), ``coinfer.minions`` (a local model reads,
a remote one that never sees the documents answers), ``coinfer.dragon`` (device and
cloud answer together, each from its own private documents) and ``coinfer.jupiter``
(several edge devices serve one model as a pipeline). ``coinfer.engines`` is the registry
through which the CLI, the server and the benchmarks reach all seven alike
(``coinfer.engines.get(name).open(parts, config)`` → a ``Session``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from coinfer.errors import CoinferError

__version__ = "0.1.0"

_EXPORTS = {
    "load_model": "coinfer.models",
    "SteerableModel": "coinfer.models",
    "SamplingParams": "coinfer.decoding",
    "SpecConfig": "coinfer.decoding",
    "generate": "coinfer.decoding",
    "stream": "coinfer.decoding",
    "Response": "coinfer.decoding",
    "DecodeStats": "coinfer.decoding",
    "Drafter": "coinfer.decoding",
    "NgramDrafter": "coinfer.decoding",
    "ModelDrafter": "coinfer.decoding",
    "TextDrafter": "coinfer.decoding",
    "open_local_chat": "coinfer.chat",
    "OpenAIChat": "coinfer.chat",
}
_ENGINES = {
    "collective": "coinfer.engines.collective",
    "dragon": "coinfer.engines.dragon",
    "engines": "coinfer.engines",
    "jupiter": "coinfer.engines.jupiter",
    "llmcad": "coinfer.engines.llmcad",
    "minions": "coinfer.engines.minions",
}

__all__ = [
    "CoinferError",
    "DecodeStats",
    "Drafter",
    "ModelDrafter",
    "NgramDrafter",
    "OpenAIChat",
    "Response",
    "SamplingParams",
    "SpecConfig",
    "SteerableModel",
    "TextDrafter",
    "__version__",
    "collective",
    "dragon",
    "engines",
    "generate",
    "jupiter",
    "llmcad",
    "load_model",
    "minions",
    "open_local_chat",
    "stream",
]

if TYPE_CHECKING:
    from coinfer.chat import OpenAIChat, open_local_chat
    from coinfer.decoding import (
        DecodeStats,
        Drafter,
        ModelDrafter,
        NgramDrafter,
        Response,
        SamplingParams,
        SpecConfig,
        TextDrafter,
        generate,
        stream,
    )
    from coinfer.engines import collective, dragon, jupiter, llmcad, minions
    from coinfer.models import SteerableModel, load_model


def __getattr__(name: str) -> Any:
    """The exports, imported on first use."""
    if name in _ENGINES:
        value = importlib.import_module(_ENGINES[name])
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'coinfer' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
