"""Python text a model wrote, parsed one thread at a time.

CPython before 3.11.9 and 3.12.3 keeps the state of its AST constructor per interpreter,
not per thread (python/cpython#106905): two threads that parse at once can make one of
them raise ``SystemError: AST constructor recursion depth mismatch``. ``coinfer serve``
runs requests on threads of their own (MinionS' job code, a reply's tool call), so every
parse in the library goes through this module's lock. Parsing a model's code or call
takes well under a millisecond, so the lock costs nothing a request would notice.
"""

from __future__ import annotations

import ast
import threading
from typing import Any, Literal

__all__ = ["literal", "parse"]

_PARSING = threading.Lock()  # not state: it serializes CPython's AST constructor


def parse(text: str, mode: Literal["exec", "eval"] = "exec") -> Any:
    """``ast.parse(text, mode=mode)``, never beside another of the library's parses."""
    with _PARSING:
        return ast.parse(text, mode=mode)


def literal(text: str) -> Any:
    """``ast.literal_eval(text)``: the value of a Python literal, never evaluated."""
    return ast.literal_eval(parse(text.lstrip(" \t"), mode="eval"))
