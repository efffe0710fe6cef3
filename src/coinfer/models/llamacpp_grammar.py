"""JSON-schema-constrained decoding on llama.cpp: its grammar sampler as a token filter.

coinfer samples from logits itself (one sampler for every backend), so llama.cpp's grammar
sampler is used only as a filter: ``allows`` asks whether one token may come next,
``restrict`` sets every token the grammar forbids to -inf, ``accept`` advances the grammar
past the chosen token. The sampler checks the sampled token first and masks the whole
vocabulary only when it is refused, which costs one grammar pass per refused token rather
than one per token, and draws from exactly the masked distribution: a token ``t`` the
grammar allows comes out with probability ``p(t) + (1 - Z) p(t) / Z = p(t) / Z``, ``Z`` the
allowed mass.

llama.cpp aborts the process when a grammar accepts a token it forbids, so ``accept``
refuses (``ConfigError``) any token ``allows`` has not passed.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from coinfer.errors import ConfigError

__all__ = ["GrammarConstraint", "schema_grammar"]


def schema_grammar(schema: Mapping[str, Any]) -> str:
    """The GBNF grammar of a JSON schema (llama-cpp-python's converter)."""
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json.dumps(dict(schema)))
    except Exception as exc:  # the converter raises bare exceptions on schemas it cannot express
        raise ConfigError(
            f"this JSON schema cannot be turned into a grammar: {exc}",
            hint="use the types object, array, string, number, integer, boolean and null",
        ) from exc


class GrammarConstraint:
    """One conversation's grammar state over a llama.cpp vocabulary."""

    def __init__(self, lc: Any, vocab: Any, grammar: str, n_vocab: int) -> None:
        self._lc = lc
        self._sampler = lc.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
        if not self._sampler:
            raise ConfigError("llama.cpp could not parse the grammar", hint="check the JSON schema")
        self._all = (lc.llama_token_data * n_vocab)()
        self._view = np.ctypeslib.as_array(self._all)
        self._one = (lc.llama_token_data * 1)()
        self._passed: int | None = None

    def allows(self, token: int) -> bool:
        """Whether the grammar lets ``token`` come next."""
        self._one[0].id, self._one[0].logit, self._one[0].p = token, 0.0, 0.0
        self._apply(self._one, 1)
        ok = not math.isinf(self._one[0].logit)
        self._passed = token if ok else None
        return ok

    def restrict(self, logits: np.ndarray) -> np.ndarray:
        """A copy of ``logits`` with every token the grammar forbids at -inf."""
        self._view["logit"] = logits
        self._view["id"] = np.arange(logits.size, dtype=np.int32)
        self._apply(self._all, logits.size)
        return self._view["logit"].astype(np.float32)

    def accept(self, token: int) -> None:
        """Advance past ``token``, which ``allows`` (or ``restrict``) must have passed."""
        if token != self._passed and not self.allows(token):
            raise ConfigError(f"token {token} is not allowed here by the grammar")
        self._lc.llama_sampler_accept(self._sampler, token)
        self._passed = None

    def close(self) -> None:
        if self._sampler:
            self._lc.llama_sampler_free(self._sampler)
            self._sampler = None

    def _apply(self, data: Any, size: int) -> None:
        first = ctypes.cast(data, ctypes.POINTER(self._lc.llama_token_data))
        array = self._lc.llama_token_data_array(data=first, size=size, selected=-1, sorted=False)
        self._lc.llama_sampler_apply(self._sampler, ctypes.byref(array))

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit llama.cpp may be gone first
            self.close()
