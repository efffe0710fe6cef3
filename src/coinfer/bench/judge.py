"""A pairwise LLM judge: MT-Bench's ``pair-v2`` setup (Zheng et al., 2023, "Judging
LLM-as-a-Judge with MT-Bench and Chatbot Arena"; FastChat's ``llm_judge``), run on a local
model.

1. ``PAIR_SYSTEM`` and ``PAIR_TEMPLATE`` are the published judge prompt: the judge explains,
   then writes ``[[A]]``, ``[[B]]`` or ``[[C]]`` (a tie).
2. ``judge_once``: the judge decodes greedily; a judge that writes no verdict within its
   budget is asked for one (``Final verdict: [[`` appended, the likeliest of A, B and C
   taken) and the verdict is marked ``forced``.
3. ``judge_pair``: both orders (position swap); the two verdicts count only when they
   agree, and a pair whose verdicts disagree is ``inconsistent`` (FastChat counts it as a
   tie).

A small local judge is far weaker than the GPT-4 of the paper: ``summarize_pairs`` reports
how often its two orders agree, which is the first limitation to read.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "PAIR_SYSTEM",
    "PAIR_TEMPLATE",
    "PairJudgment",
    "Verdict",
    "judge_once",
    "judge_pair",
    "read_verdict",
    "summarize_pairs",
]

PAIR_SYSTEM = (
    "Please act as an impartial judge and evaluate the quality of the responses provided by two AI "
    "assistants to the user question displayed below. You should choose the assistant that follows the "
    "user's instructions and answers the user's question better. Your evaluation should consider factors "
    "such as the helpfulness, relevance, accuracy, depth, creativity, and level of detail of their "
    "responses. Begin your evaluation by comparing the two responses and provide a short explanation. "
    "Avoid any position biases and ensure that the order in which the responses were presented does not "
    "influence your decision. Do not allow the length of the responses to influence your evaluation. Do "
    "not favor certain names of the assistants. Be as objective as possible. After providing your "
    'explanation, output your final verdict by strictly following this format: "[[A]]" if assistant A is '
    'better, "[[B]]" if assistant B is better, and "[[C]]" for a tie.'
)
PAIR_TEMPLATE = (
    "[User Question]\n{question}\n\n"
    "[The Start of Assistant A's Answer]\n{answer_a}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{answer_b}\n[The End of Assistant B's Answer]"
)
FORCE_VERDICT = "\n\nFinal verdict: [["
JUDGE_TOKENS = 320

Winner = Literal["A", "B", "C"]
Outcome = Literal["first", "second", "tie", "inconsistent"]
_VERDICT = re.compile(r"\[\[([ABC])\]\]")


@dataclass(frozen=True)
class Verdict:
    winner: Winner
    forced: bool
    text: str


@dataclass(frozen=True)
class PairJudgment:
    """``outcome`` is for ``first`` against ``second`` (the names the caller gave)."""

    outcome: Outcome
    in_order: Verdict
    swapped: Verdict


def read_verdict(text: str) -> Winner | None:
    """The verdict a judgment ends on (its last ``[[X]]``), or None if it has none."""
    found = _VERDICT.findall(text)
    return found[-1] if found else None  # type: ignore[no-any-return]


def judge_once(
    judge: Any, question: str, answer_a: str, answer_b: str, *, max_tokens: int = JUDGE_TOKENS
) -> Verdict:
    """One judgment of assistant A's answer against B's (``judge``: a ``SteerableModel``)."""
    from coinfer.decoding.speculative import SpecConfig, generate

    prompt = judge.user_prompt(
        PAIR_TEMPLATE.format(question=question, answer_a=answer_a, answer_b=answer_b), system=PAIR_SYSTEM
    )
    response = generate(judge, prompt, draft="auto", config=SpecConfig(max_tokens=max_tokens))
    winner = read_verdict(response.text)
    if winner is not None:
        return Verdict(winner, False, response.text)
    return Verdict(_ask_for_verdict(judge, [*prompt, *response.tokens]), True, response.text)


def _ask_for_verdict(judge: Any, context: Sequence[int]) -> Winner:
    """The likeliest of A, B and C after ``context`` and ``FORCE_VERDICT``."""
    letters: tuple[Winner, ...] = ("A", "B", "C")
    choices = {c: judge.tokenize(c)[0] for c in letters}
    seq = judge.new_sequence()
    try:
        logits = judge.extend(seq, [*context, *judge.tokenize(FORCE_VERDICT)], last_only=True)[-1]
    finally:
        judge.release(seq)
    return max(letters, key=lambda c: float(logits[choices[c]]))


def judge_pair(judge: Any, question: str, first: str, second: str) -> PairJudgment:
    """``first`` against ``second``, judged in both orders."""
    in_order = judge_once(judge, question, first, second)
    swapped = judge_once(judge, question, second, first)
    seen: dict[str, Outcome] = {"A": "first", "B": "second", "C": "tie"}
    flipped: dict[str, Outcome] = {"A": "second", "B": "first", "C": "tie"}
    a, b = seen[in_order.winner], flipped[swapped.winner]
    return PairJudgment(a if a == b else "inconsistent", in_order, swapped)


def summarize_pairs(outcomes: Sequence[Outcome], *, first: str, second: str) -> dict[str, Any]:
    """Counts, and the share of pairs where ``first`` is no worse than ``second``: as
    FastChat counts it (an inconsistent pair is a tie) and strictly (only consistent
    wins and ties)."""
    n, count = len(outcomes), Counter(outcomes)
    wins, ties, losses, mixed = count["first"], count["tie"], count["second"], count["inconsistent"]

    def share(k: int) -> float | None:
        return round(k / n, 3) if n else None

    return {
        "pairs": n,
        f"{first}_wins": wins,
        "ties": ties,
        f"{second}_wins": losses,
        "inconsistent": mixed,
        "order_agreement": share(n - mixed),
        "no_worse": share(wins + ties + mixed),
        "no_worse_strict": share(wins + ties),
    }
