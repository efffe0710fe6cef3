"""Stop strings (OpenAI's ``stop``): the text ends before the first of them, and a stream
never shows a piece of one: text that could be the start of a stop string is held back
until the next piece says whether it is."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["StopScanner"]


class StopScanner:
    """Feed text as it comes (``push``); get what may be shown and whether a stop string
    ended it."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.held = ""
        self.stopped = False

    def push(self, text: str, *, final: bool = False) -> tuple[str, bool]:
        """What of ``held + text`` may be shown now, and whether a stop string was met
        (the text before it is all there is). ``final``: no more text will come."""
        if self.stopped:
            return "", True
        text = self.held + text
        cut = min((i for i in (text.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self.held, self.stopped = "", True
            return text[:cut], True
        keep = 0 if final else self._partial(text)
        self.held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep], False

    def _partial(self, text: str) -> int:
        """The longest end of ``text`` that begins a stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best
