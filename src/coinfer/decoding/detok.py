"""Incremental detokenization: text deltas that never split a UTF-8 character.

A token may end in the middle of a multi-byte character (the decoded text then ends in
U+FFFD); its text is held back until the next tokens complete it. Only a short window of
tokens is decoded per step, so a stream costs O(n), not O(n^2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["IncrementalDetokenizer"]


class IncrementalDetokenizer:
    """Feed tokens one at a time; get back the text they add."""

    def __init__(self, detokenize: Callable[[Sequence[int]], str]) -> None:
        self._detok = detokenize
        self._tokens: list[int] = []
        self._prefix = 0  # start of the window decoded for context
        self._read = 0  # tokens whose text has been emitted

    def push(self, token: int) -> str:
        self._tokens.append(token)
        before = self._detok(self._tokens[self._prefix : self._read])
        after = self._detok(self._tokens[self._prefix :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self._tokens)
            return after[len(before) :]
        return ""

    def flush(self) -> str:
        """The text still held back (an incomplete character at the end, if any)."""
        before = self._detok(self._tokens[self._prefix : self._read])
        after = self._detok(self._tokens[self._prefix :])
        self._prefix = self._read = len(self._tokens)
        return after[len(before) :]
