"""Getting JSON objects and Python code out of model replies, leniently.

Models wrap JSON in code fences, add a sentence before it, or use single quotes; small
ones more so. ``json_object`` takes the first decodable ``{…}`` in the text (fenced or
not) and returns None when there is none, so the caller can retry or abstain.
``python_code`` takes the first fenced Python block, or the whole reply when it parses
as Python.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

__all__ = ["json_object", "python_code"]

_FENCE = re.compile(r"```[ \t]*(\w*)[^\n]*\n(.*?)```", re.S)


def json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (inside a fence or not), or None."""
    candidates = [body for _, body in _FENCE.findall(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for match in re.finditer(r"\{", candidate):
            try:
                value, _ = decoder.raw_decode(candidate, match.start())
            except ValueError:
                value = _python_literal(candidate[match.start() :])
            if isinstance(value, dict):
                return value
    return None


def _python_literal(text: str) -> Any:
    """A dict written the Python way ({'a': None}), up to its closing brace, or None."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            try:
                return ast.literal_eval(text[: i + 1])
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                return None
    return None


def python_code(text: str) -> str | None:
    """The first fenced Python block of a reply, or the reply itself when it is Python."""
    for lang, body in _FENCE.findall(text):
        if lang.lower() in ("python", "py", ""):
            return body
    try:
        ast.parse(text)
    except SyntaxError:
        return None
    return text
