"""Getting JSON objects and Python code out of model replies, leniently.

Models wrap JSON in code fences, add a sentence before it, or use single quotes; small
ones more so. ``json_object`` takes the first decodable ``{…}`` in the text (fenced or
not) and returns None when there is none, so the caller can retry or abstain.
``python_code`` takes the first fenced Python block, or the whole reply when it parses
as Python.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from coinfer.chat import python_text

__all__ = ["json_object", "python_code"]

MAX_STARTS = 64  # opening braces tried per candidate text
# a fence's info string is short: bounding it keeps a reply of nothing but backticks linear
# (unbounded, 20,000 backticks took 0.6 s and the time grew with the square)
_FENCE = re.compile(r"```[ \t]*(\w*)[^\n]{0,64}\n(.*?)```", re.S)


def json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (inside a fence or not), or None. Only the first
    ``MAX_STARTS`` braces of each candidate are tried, and the braces are matched once per
    candidate, so a reply of nothing but braces takes time linear in its length."""
    candidates = [body for _, body in _FENCE.findall(text)] + [text]
    decoder = json.JSONDecoder()
    for candidate in candidates:
        closes: dict[int, int] | None = None
        for match in itertools.islice(re.finditer(r"\{", candidate), MAX_STARTS):
            try:
                value, _ = decoder.raw_decode(candidate, match.start())
            except RecursionError:  # nested past the decoder's stack: no answer of ours looks so
                value = None
            except ValueError:
                closes = _closing_braces(candidate) if closes is None else closes
                end = closes.get(match.start())
                value = None if end is None else _python_literal(candidate[match.start() : end + 1])
            if isinstance(value, dict):
                return value
    return None


def _closing_braces(text: str) -> dict[int, int]:
    """For every ``{`` of ``text`` that is closed, where its ``}`` is (by depth alone)."""
    out, opened = {}, []
    for i, ch in enumerate(text):
        if ch == "{":
            opened.append(i)
        elif ch == "}" and opened:
            out[opened.pop()] = i
    return out


def _python_literal(text: str) -> Any:
    """A dict written the Python way ({'a': None}), or None."""
    try:
        return python_text.literal(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def python_code(text: str) -> str | None:
    """The first fenced Python block of a reply, or the reply itself when it is Python."""
    for lang, body in _FENCE.findall(text):
        if lang.lower() in ("python", "py", ""):
            return body
    try:
        python_text.parse(text)
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # deep nesting exhausts the parser
        return None
    return text
