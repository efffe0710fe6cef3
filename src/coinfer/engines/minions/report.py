"""What an answer tells the user: the JSON summary, a round-by-round trace and a cost
table, all read from the answer's ``Response`` (its ``extras``)."""

from __future__ import annotations

from typing import Any

from coinfer.chat.base import Usage
from coinfer.chat.pricing import Price
from coinfer.decoding.response import Response

__all__ = ["cost_table", "round_costs", "side_usage", "summary", "trace_line"]


def side_usage(answer: Response, side: str) -> Usage:
    """What one side (``remote`` or ``local``) read and wrote for this answer."""
    return Usage(**answer.extras["usage"][side])


def summary(answer: Response, *, price: Price | None, priced_as: str | None) -> dict[str, Any]:
    """The ``--json`` object: answer, protocol, rounds, usage per side (and per round), the
    seconds spent on each side and in the sandbox, dollars."""
    extras = answer.extras
    return {
        "answer": answer.text,
        "protocol": extras["protocol"],
        "rounds": extras["rounds"],
        "best_effort": extras["best_effort"],
        "problems": extras["problems"],
        "usage": extras["usage"],
        "seconds": extras.get("seconds"),
        "cost_usd": round(price.cost(side_usage(answer, "remote")), 6) if price else 0.0,
        "priced_as": priced_as if price else None,
    }


def round_costs(answer: Response, price: Price | None) -> dict[str, float]:
    """The remote's dollars per round (none without a price)."""
    if price is None:
        return {}
    by_round = answer.extras["usage"]["by_round"]["remote"]
    return {r: round(price.cost(Usage(**u)), 6) for r, u in by_round.items()}


def trace_line(e: dict[str, Any]) -> list[str]:
    """One step of the trace for a person: a call with its tokens, a code run, jobs made,
    answers kept and abstentions."""
    head = f"round {e['round']}  "
    if e["event"] == "chat":
        u = e["usage"]
        return [
            f"{head}{e['side']:<6} {e['purpose']}: {e['requests']} request(s), "
            f"{u['prompt_tokens']:,} in / {u['completion_tokens']:,} out tokens"
            + (f", {e['seconds']} s" if "seconds" in e else "")
        ]
    if e["event"] == "code":
        state = f"ran in {e['elapsed_s']} s" if e["ok"] else f"{e['kind']}: {e['error'][:160]}"
        return [f"{head}sandbox: {state}"]
    d = e["data"]
    if e["event"] == "jobs":
        tasks = [f"{head}  task: {t[:120]}" for t in d["tasks"]]
        return [f"{head}jobs: {d['jobs']} ({len(d['tasks'])} task(s) over {d['chunks']} chunk(s))", *tasks]
    if e["event"] == "abstentions":
        return [
            f"{head}local answers: {d['answered']} kept, {d['abstained']} abstained "
            f"({d['invalid_json']} after invalid JSON twice, {d.get('unverified', 0)} with a citation "
            "not in their chunk)"
        ]
    if e["event"] == "retrieved":
        return [f"{head}retrieved: {len(d['sent'])} of {d['chunks']} chunks sent ({', '.join(d['sent'])})"]
    return [f"{head}{e['event']}: {d}"]


def cost_table(answer: Response, *, price: Price | None, priced_as: str | None) -> str:
    """Calls, tokens and dollars per side."""
    rows = [f"{'side':<7}{'calls':>7}{'input tokens':>15}{'output tokens':>15}  cost"]
    for side in ("remote", "local"):
        u = side_usage(answer, side)
        if side == "remote":
            cost = (
                f"${price.cost(u):.4f} (priced as {priced_as})"
                if price
                else "unpriced (pass --price-as MODEL)"
            )
        else:
            cost = "$0 (this machine)"
        mark = " (estimated)" if u.estimated else ""
        rows.append(f"{side:<7}{u.calls:>7}{u.prompt_tokens:>15,}{u.completion_tokens:>15,}  {cost}{mark}")
    return "\n".join(rows)
