"""Outline-based decoding's words (paper 004 §V-B): the directive that asks for an outline,
the request that expands one point, reading the outline, assembling the answer, and the
router that decides whether a question suits an outline at all.

The directives are Skeleton-of-Thought's (Ning et al., ICLR 2024, whose idea §V-B
borrows), changed only where the point request no longer repeats the question and the
outline: here they are earlier turns of the same conversation, whose cache every point
shares. The router is a rule-based reading of the question, in the spirit of the paper's
switch (§V-B: "math and coding ... or tasks needing only short answers" are answered
sequentially): cues of code, arithmetic, a short or single-piece answer send a question to
sequential decoding; cues of several independent parts (lists, ways, steps,
comparisons, pros and cons) take the outline; a question with neither is answered
sequentially, the safe side.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "OUTLINE_DIRECTIVE",
    "POINT_REQUEST",
    "Route",
    "assemble",
    "parse_outline",
    "point_end",
    "point_text",
    "route",
    "whole_sentences",
]

OUTLINE_DIRECTIVE = (
    "You're an organizer responsible for only giving the skeleton (not the full content) for answering "
    "the question. Provide the skeleton in a list of points (numbered 1., 2., 3., etc.) to answer the "
    "question. Instead of writing a full sentence, each skeleton point should be very short with only "
    "3~5 words. Generally, the skeleton should have 3~10 points. Now, please provide the skeleton for "
    "the following question.\n{question}\nSkeleton:"
)
OUTLINE_START = "1."  # the assistant's answer begins so: the outline's first point
POINT_REQUEST = (
    "Continue and only continue the writing of point {index}. Write it **very shortly** in 1~2 "
    "sentences and do not continue with other points!"
)
MAX_POINTS = 8

_POINT = re.compile(r"^\s*(\d+)\.\s*(.+?)\s*$")
_NEXT_POINT = re.compile(r"\n\s*\d+(\.(?!\d)|$)")  # "\n3." or, cut short, "\n3"
_SENTENCE_END = re.compile(r"[.!?](?=\s)|[.!?]$|\n")


def parse_outline(text: str) -> list[str]:
    """The points of an outline ``1. …\\n2. …``, in order: consecutive numbers from 1, at
    most ``MAX_POINTS``; the outline ends at the first line that is not its next point."""
    points: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            if points:
                break
            continue
        match = _POINT.match(line)
        if match is None or int(match.group(1)) != len(points) + 1:
            break
        point = match.group(2).strip(" *:")
        if not point:
            break
        points.append(point)
        if len(points) == MAX_POINTS:
            break
    return points


def point_end(expansion: str) -> int | None:
    """Where a point's expansion runs on into another point (``\\n3. …``, or a last line
    ``\\n3`` that was cut before its dot), or None."""
    match = _NEXT_POINT.search(expansion)
    return match.start() if match else None


def whole_sentences(expansion: str) -> str:
    """A point's expansion that ran out of tokens, up to the end of its last whole
    sentence (or line); as it is where it holds none."""
    ends = [m.end() for m in _SENTENCE_END.finditer(expansion.rstrip())]
    return expansion[: ends[-1]].rstrip() if ends else expansion


def point_text(index: int, point: str, expansion: str) -> str:
    """Point ``index`` (from 1) of the answer: its heading in bold, as its request began
    it (a colon asks for the explanation on the same line), then what was written after
    it, up to where it ran on into another point."""
    end = point_end(expansion)
    return f"{index}. **{point}**:{expansion[:end] if end is not None else expansion}".rstrip()


def assemble(points: list[str], expansions: list[str]) -> str:
    """The answer in the outline's order."""
    return "\n".join(
        point_text(i, point, text)
        for i, (point, text) in enumerate(zip(points, expansions, strict=True), start=1)
    )


@dataclass(frozen=True)
class Route:
    """The router's decision for one question, and the cue it went by."""

    outline: bool
    reason: str

    def as_dict(self) -> dict[str, object]:
        return {"outline": self.outline, "reason": self.reason}


_CODE = re.compile(
    r"```|\bdef \w+\(|\bclass \w+[:(]|\bimport \w+|\breturn\b|>>>|\"\"\"|\bfunction\b|\bcode\b|"
    r"\bprogram\b|\bscript\b|\bimplement|\bpython\b|\bjavascript\b|\bsql\b|\bregex\b|\bc\+\+|\bjava\b|"
    r"\bcompile|\bdebug|\bbug\b|\balgorithm to\b",
    re.IGNORECASE,
)
_MATH = re.compile(
    r"\d\s*[-+*/^=×÷]\s*\d|\b(calculate|compute|solve|prove|equation|integral|derivative|probability|"
    r"how many|how much|what is \d|sum of|product of|percent|arithmetic)\b",
    re.IGNORECASE,
)
_SINGLE = re.compile(
    r"\b(translate|rewrite|paraphrase|summari[sz]e (this|the following)|poem|haiku|limerick|story|joke|"
    r"slogan|tweet|email to|letter to|one word|one sentence|yes or no|true or false|define|definition of)\b",
    re.IGNORECASE,
)
_SHORT = re.compile(r"^\s*(who|when|where|which|is|are|does|do|did|can|was|were)\b", re.IGNORECASE)
_PARTS = re.compile(
    r"\b(list|ways?|tips|steps|methods|strategies|advantages|disadvantages|pros and cons|benefits|"
    r"drawbacks|compare|comparison|differences?|factors|reasons|causes|effects|ideas|suggestions?|"
    r"recommend\w*|best practices|key|main|several|some|habits|techniques|aspects|features|examples|"
    r"considerations|challenges|how (can|do|should|to|would)|what (are|should|can)|why (do|does|is|are)|"
    r"explain|describe|outline|overview|guide|plan|prepare|improve|organi[sz]e)\b",
    re.IGNORECASE,
)


def route(question: str) -> Route:
    """Outline or not for ``question`` (see the module's note for the rules)."""
    for name, cue in (("code", _CODE), ("math", _MATH), ("a single piece", _SINGLE)):
        match = cue.search(question)
        if match:
            return Route(False, f"{name}: {match.group(0).strip()!r}")
    words = len(question.split())
    parts = _PARTS.search(question)
    if parts is None:
        return Route(False, "no cue of several parts")
    if words < 5 and _SHORT.match(question):
        return Route(False, "a short question")
    return Route(True, f"several parts: {parts.group(0)!r}")
