"""Each category of a suite as a workload of its own (``coinfer bench collective
--category-workloads``).

In a batch that mixes categories, one request's decode rate depends on how many others
run beside it: on a CPU, where decoding is compute-bound, a batch-4 forward costs several
one-request forwards, so a request left alone at the end of the queue decodes several
times faster than one in a full batch. Drafting changes when requests finish, so the same
category runs beside different company under plain decoding and under the engine, and its
per-request ratio measures the queue as much as the drafting. A user whose traffic is one
kind of request fills the batch with that kind: running each category's prompts alone,
the category's figure is the run's own decode rate (its tokens after each request's first
over its time not spent reading prompts), with the batch as full as the prompts allow in
both runs. Each workload starts with fresh drafters, as a new process would: what the
gate learns on one category is not carried to the next.

With repeats, a category runs under every configuration in turn, that many times, before
the next category (the order reversed every other time, so a drift of the machine's speed
over those minutes falls on both sides alike), and its figure is the median, over the
repeats, of each repeat's decode rate against plain decoding's in the same repeat
(``paired_ratios``): two runs of the same work on this machine lie up to a quarter apart,
an hour apart more than a minute apart.

A configuration's run is then its category runs joined (``joined_run``): their responses
in suite order, their summed wall time, and one engine record that sums them
(``merged_record``), with each category's ``[tokens, decode seconds]`` in ``workloads``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from coinfer.decoding import Response

__all__ = ["WorkloadPart", "joined_run", "merged_record", "paired_ratios", "workload_figures",
           "tokens_after_first", "workload_runs"]  # fmt: skip

_SUMMED = ("verifications", "predrafts_used", "predrafts_wasted", "pipelined_rounds", "pipeline_probes",
          "draft_s", "verify_s", "prefill_s", "rounds_drafting", "rounds_exploring",
          "forward_sizes", "forward_shapes")  # fmt: skip
_CONCATENATED = ("s_history", "longest_draft", "voted_from")  # one entry per round
_AVERAGED = ("acceptance_by_draft", "weights")  # per draft, a rate or a weight


@dataclass(frozen=True)
class WorkloadPart:
    """One category's run under one configuration: the suite indices of its prompts, the
    responses in that order, and the run's wall seconds."""

    category: str
    indices: list[int]
    responses: list[Response]
    wall_s: float


def joined_run(parts: Sequence[WorkloadPart]) -> tuple[list[Response], float]:
    """A configuration's category runs as one run: the responses in suite order, each
    carrying one record of every part (``merged_record``, with each category's tokens
    after each request's first and decode seconds in ``workloads``, and its verifying
    forwards by size in ``workload_forwards`` and by shape, rows x tokens, in
    ``workload_shapes``, each request's tokens after its first, longest first, in
    ``workload_lengths``, the split judge's pairs at the part's end in
    ``workload_split_pairs``, and its forwards' summed ms by shape in
    ``workload_shape_ms``), and the summed wall time."""
    by_index: dict[int, Response] = {}
    records, workloads, forwards, shapes, lengths, pairs, shape_ms = [], {}, {}, {}, {}, {}, {}
    for part in parts:
        by_index.update(zip(part.indices, part.responses, strict=True))
        record = part.responses[0].extras if part.responses else {}
        records.append(record)
        tokens = tokens_after_first(part.responses)
        workloads[part.category] = [tokens, round(part.wall_s - float(record.get("prefill_s", 0.0)), 4)]
        forwards[part.category] = dict(record.get("forward_sizes") or {})
        shapes[part.category] = dict(record.get("forward_shapes") or {})
        lengths[part.category] = sorted((max(0, len(r.tokens) - 1) for r in part.responses), reverse=True)
        pairs[part.category] = dict(record.get("split_pairs") or {})
        shape_ms[part.category] = dict(record.get("forward_shape_ms") or {})
    record = {**merged_record(records), "workloads": workloads, "workload_forwards": forwards,
              "workload_shapes": shapes, "workload_lengths": lengths,
              "workload_split_pairs": pairs, "workload_shape_ms": shape_ms}  # fmt: skip
    return [replace(by_index[i], extras=record) for i in sorted(by_index)], sum(p.wall_s for p in parts)


def tokens_after_first(responses: Sequence[Response]) -> int:
    """The tokens of every response after its first (the decoded ones; the first comes
    with the prefill)."""
    return sum(max(0, len(r.tokens) - 1) for r in responses)


def merged_record(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One engine record for runs made one after another: counts and seconds summed (per
    draft where they are per draft), per-round lists joined, per-draft rates and weights
    averaged over the runs that have them; anything else as the first run has it."""
    out: dict[str, Any] = dict(records[0]) if records else {}
    for key in out:
        values = [r.get(key) for r in records]
        if key in _SUMMED:
            out[key] = _combine(values, _sum)
        elif key in _CONCATENATED:
            out[key] = [x for v in values for x in v or []]
        elif key in _AVERAGED:
            out[key] = _combine(values, _mean)
    return out


def _combine(values: list[Any], reduce: Any) -> Any:
    """``reduce`` over the numbers in ``values``; over each key where they are dicts."""
    dicts = [v for v in values if isinstance(v, dict)]
    if dicts:
        keys = list(dict.fromkeys(k for d in dicts for k in d))
        return {k: reduce([d.get(k) for d in dicts]) for k in keys}
    return reduce(values)


def _sum(values: list[Any]) -> float | None:
    numbers = [v for v in values if isinstance(v, int | float)]
    return round(sum(numbers), 4) if numbers else None


def _mean(values: list[Any]) -> float | None:
    numbers = [v for v in values if isinstance(v, int | float)]
    return round(sum(numbers) / len(numbers), 4) if numbers else None


def workload_figures(records: Sequence[dict[str, Any]]) -> dict[str, list[float]]:
    """Per category, from the runs of one configuration: ``[tokens, seconds, 0.0]`` of the
    run with the best decode rate (the shape ``by_category`` has, with no stalls to leave
    out: a workload's decode seconds already leave its prefills out)."""
    out: dict[str, list[float]] = {}
    for record in records:
        for category, (tokens, seconds) in (record.get("workloads") or {}).items():
            best = out.get(category)
            if seconds > 0 and (best is None or tokens / seconds > best[0] / best[1]):
                out[category] = [tokens, seconds, 0.0]
    return out


Runs = dict[str, list[list[float]]]  # per category, [tokens, decode seconds] of each run


def workload_runs(records: Sequence[dict[str, Any]]) -> Runs:
    """Per category, from the runs of one configuration in order: ``[tokens, decode
    seconds]`` of each run (the pairs ``paired_ratios`` matches by position)."""
    out: Runs = {}
    for record in records:
        for category, (tokens, seconds) in (record.get("workloads") or {}).items():
            out.setdefault(category, []).append([tokens, seconds])
    return out


def paired_ratios(mine: Runs, plain: Runs) -> dict[str, list[float]]:
    """Per category both have, each repeat's decode rate over plain decoding's in the same
    repeat, in repeat order (only where both ran a category equally often)."""
    out: dict[str, list[float]] = {}
    for category, runs in mine.items():
        theirs = plain.get(category, [])
        if len(theirs) == len(runs) and all(s > 0 for _, s in runs + theirs) and all(t for t, _ in theirs):
            pairs = zip(runs, theirs, strict=True)
            out[category] = [round((t / s) / (pt / ps), 3) for (t, s), (pt, ps) in pairs]
    return out
