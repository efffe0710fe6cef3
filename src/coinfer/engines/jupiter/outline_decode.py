"""Outline-based pipeline-parallel decoding on rank 0 (paper 004 §V-B, Fig. 9):

1. the outline directive and the question are read (pipelined prefill, as any prompt);
2. the outline is decoded as one shared branch (with the heads' trees when speculating);
3. each point becomes its own request, a branch after the shared cache of every stage:
   the question and the outline are not read again; the point requests go through the
   pipeline together, one call per group of points in flight;
4. the answer is the points in the outline's order.

An outline with fewer than two points is not one: the stages forget it and the question
is answered sequentially (the plain chat prompt, one branch). The generator yields
``OutlineEvent``s: each verification round, then the outline's points, then each point's
text once it and every point before it is done.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

from coinfer.engines.jupiter.branch_driver import Branch, BranchDriver, BranchRound
from coinfer.engines.jupiter.outline import (
    MAX_POINTS,
    OUTLINE_DIRECTIVE,
    OUTLINE_START,
    POINT_REQUEST,
    parse_outline,
    point_end,
    point_text,
    whole_sentences,
)
from coinfer.engines.jupiter.tree_pipeline import prefill_answer
from coinfer.errors import ConfigError

__all__ = ["OutlineEvent", "OutlinePlan", "decode_outline", "outline_prompt"]

OUTLINE_BUDGET = 96  # the outline's tokens at most
HEADING_WORDS = 8  # a point's heading at most
POINT_TOKENS = 32  # a point's expansion may take at least these, whatever max_tokens
_HEADING = re.compile(r"\d+\.[ \t]*(?:\*\*[^*\n]+\*\*|[^\n:*]*[^\s:*])")


@dataclass(frozen=True)
class OutlinePlan:
    """What the request may spend: ``max_tokens`` for the answer, shared by the points."""

    max_tokens: int
    groups: int
    system: str | None = None


@dataclass
class OutlineEvent:
    """``round``: a verification (``points``: None); ``points``: the outline was read
    (empty: it was not one, the answer comes sequentially); ``text``: point ``point``'s
    expansion, told in order."""

    round: BranchRound | None = None
    points: list[str] | None = None
    text: str = ""
    point: int | None = None
    sequential: bool = False
    extras: dict[str, Any] = field(default_factory=dict)


def _messages(question: str, system: str | None) -> list[dict[str, str]]:
    first = [{"role": "system", "content": system}] if system else []
    return [*first, {"role": "user", "content": OUTLINE_DIRECTIVE.format(question=question)}]


def outline_prompt(text: Any, question: str, system: str | None = None) -> list[int]:
    """The ids that ask for the outline: the directive, the question, and the answer's
    start ``1.``."""
    if not text.template.source:
        raise ConfigError(
            f"{text.name} has no chat template: outline decoding needs one", hint="use --decode sd or naive"
        )
    return text.chat_prompt(_messages(question, system)) + text.tokenize(OUTLINE_START)


def _point_requests(
    text: Any, question: str, system: str | None, outline: str, points: list[str]
) -> list[list[int]]:
    """Each point's request as the tokens after the shared cache (prompt + outline)."""
    before = text.template.render(_messages(question, system)) + OUTLINE_START + outline
    out = []
    for i, point in enumerate(points, start=1):
        turns = [*_messages(question, system), {"role": "assistant", "content": OUTLINE_START + outline},
                 {"role": "user", "content": POINT_REQUEST.format(index=i)}]  # fmt: skip
        whole = text.template.render(turns)
        if not whole.startswith(before):
            raise ConfigError(f"{text.name}'s chat template does not extend a conversation by appending")
        out.append(text.tokenize(whole[len(before) :] + point_text(i, point, ""), special=True))
    return out


def decode_outline(
    driver: BranchDriver, world: int, text: Any, question: str, prompt: Sequence[int], parts: Sequence[int],
    plan: OutlinePlan,
) -> Generator[OutlineEvent, None, None]:  # fmt: skip
    """The request on rank 0 (``prompt``: ``outline_prompt``'s ids, read in ``parts``)."""
    first = prefill_answer(driver.stage, world, prompt, parts, driver.verifier, driver.traffic,
                           2 + driver.heads * driver.width)  # fmt: skip
    driver.hold(len(prompt))
    yield OutlineEvent(round=BranchRound(-1, first[1:2], 0, 0))
    budget = min(OUTLINE_BUDGET, plan.max_tokens)
    kept, held = yield from _outline_lines(driver, text, len(prompt), first[1], first[2:], budget)
    body = text.detokenize(kept)
    points = parse_outline(OUTLINE_START + body)
    if len(points) < 2:
        yield OutlineEvent(points=[], sequential=True, extras={"outline_text": OUTLINE_START + body})
        yield from _sequential(driver, text, question, plan)
        return
    yield OutlineEvent(points=points, extras={"outline_tokens": len(kept)})
    unheld = kept[held - len(prompt) :]  # the outline's tokens the stages have not read yet
    yield from _points(driver, text, question, plan, held, unheld, body, points)


def _outline_lines(
    driver: BranchDriver, text: Any, start: int, first: int, guesses: list[int], budget: int
) -> Generator[OutlineEvent, None, tuple[list[int], int]]:
    """Step 2, a line at a time: each line is cut to its point's heading (a bold title, or
    at most ``HEADING_WORDS`` words before a colon) and the next line is begun with its
    number, so that a model that explains every point in its outline still gives a short
    one. The outline ends at an end of generation, a heading given before, or
    ``MAX_POINTS``. Returns the outline's tokens (from ``start``) and how far the stages
    hold them (the last may be still to feed)."""
    kept: list[int] = []
    line = Branch(-1, start, [first], budget, guesses, [first], done=first in driver.eos)
    at, index, lead, headings = start, 1, OUTLINE_START, set[str]()  # at: the line's first token
    begun = 0  # len(kept) before the line's number: what stays if the line is no point
    while True:
        if not line.done:
            for r in driver.decode([[line]], stop=lambda b: _line_over(text, b.produced)):
                yield OutlineEvent(round=r)
        words = _before_end(line.produced, driver.eos)
        cut = _heading_cut(text, lead, words)
        heading = text.detokenize(words[:cut]).strip(" *:").lower()
        if cut == 0 or heading in headings:  # no new point: the number that began it goes too
            kept = kept[:begun]
            break
        headings.add(heading)
        kept += words[:cut]
        if len(words) < len(line.produced) or index == MAX_POINTS or len(kept) >= budget:
            break
        held = min(at + cut, line.start)  # the line's tokens the stages hold (its heading's)
        driver.forget(lambda b, p, held=held: b != -1 or p < held)  # type: ignore[misc]
        index, lead = index + 1, f"{index + 1}."
        number = text.tokenize("\n" + lead)
        if budget - len(kept) - len(number) < 1:
            break
        line = Branch(-1, held, kept[held - start :] + number, budget - len(kept) - len(number))
        begun = len(kept)
        kept += number
        at = start + len(kept)
    held = min(start + len(kept), line.start)
    driver.forget(lambda b, p: b != -1 or p < held)
    return kept, held


def _before_end(tokens: list[int], eos: Any) -> list[int]:
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[:i]
    return tokens


def _line_over(text: Any, tokens: list[int]) -> bool:
    """The line has run past its heading: a newline, a colon, or too many words."""
    line = text.detokenize(tokens)
    return "\n" in line or ":" in line or len(line.split()) > HEADING_WORDS


def _heading_cut(text: Any, lead: str, tokens: list[int]) -> int:
    """How many of the line's ``tokens`` (after its number ``lead``) hold its heading (0:
    none)."""
    whole = lead + text.detokenize(tokens)
    match = _HEADING.match(whole)
    if match is None:
        return 0
    words = list(re.finditer(r"\S+", whole[: match.end()]))
    end = words[min(len(words), HEADING_WORDS + 1) - 1].end()  # the number and the words
    for j in range(1, len(tokens) + 1):
        if len(lead + text.detokenize(tokens[:j])) >= end:
            return j
    return len(tokens)


def _points(
    driver: BranchDriver,
    text: Any,
    question: str,
    plan: OutlinePlan,
    shared: int,
    unheld: list[int],
    body: str,
    points: list[str],
) -> Generator[OutlineEvent, None, None]:
    """Step 3: every point a branch after the ``shared`` entries (``unheld``: the outline's
    tokens after them, which each branch reads as its own); the text in order."""
    requests = _point_requests(text, question, plan.system, body, points)
    budget = max(POINT_TOKENS, plan.max_tokens // len(points))
    branches = [Branch(i, shared, unheld + feed, budget) for i, feed in enumerate(requests)]
    groups = [branches[g :: plan.groups] for g in range(min(plan.groups, len(branches)))]
    told = 0
    for r in driver.decode(groups, stop=lambda b: point_end(text.detokenize(b.produced)) is not None):
        yield OutlineEvent(round=r)
        while told < len(branches) and branches[told].done:
            kept = [t for t in branches[told].produced if t not in driver.eos]
            said = text.detokenize(kept)  # cut off by its budget: to its last whole sentence
            cut = branches[told].finish == "length"
            yield OutlineEvent(text=whole_sentences(said) if cut else said, point=told)
            told += 1


def _sequential(
    driver: BranchDriver, text: Any, question: str, plan: OutlinePlan
) -> Generator[OutlineEvent, None, None]:
    """No outline: the stages forget it and read the plain question as one branch."""
    driver.forget(lambda b, p: False)
    answer = Branch(-1, 0, text.user_prompt(question, system=plan.system), plan.max_tokens)
    for r in driver.decode([[answer]]):
        yield OutlineEvent(round=r, sequential=True)
