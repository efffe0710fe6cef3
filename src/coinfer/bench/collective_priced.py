"""The collective bench's decode rates with every run's forwards priced alike.

On a shared 2-core machine the wall time of identical work drifts: plain decoding's three
runs of one category, each a minute apart, took 18.5, 24.7 and 34.6 s for the same 127
forwards (``docs/bench/collective``). A 3% floor per category cannot be read off such
clocks. What the engine changes is the target's work: how many verifying forwards a
category takes and over how many sequences and tokens each. So the engine records its
forwards by shape (``forward_shapes``: ``"4x12"``, 4 rows and 12 tokens -> forwards), and
after a batch size's runs the bench times the target once for each shape seen
(``forward_prices``: batched forwards over that many rows, each on top of its own copy
of a prompt, the tokens spread evenly, the median of a few rounds that each time every
shape once). A run's *priced* decode rate is
its tokens after each request's first over the sum of its forwards' prices, and a
configuration's priced ratio is that over plain decoding's at the same batch size, from
one price table for all of them: the same forwards cost the same, whatever the machine
did while each ran. Results from before shapes were recorded priced forwards by tokens
alone, as if one sequence held them; at batch 4 those forwards took 1.4-1.6 times their
price by the clock (1.04-1.08 at batch 1).

The table is timed in rounds, each timing every shape once: timed shape after shape, a
slow spell of the machine's landed on all of one shape's repeats, and run M's table
(``docs/bench/collective``, batch 8) priced 4 rows of 4 tokens above 4 rows of 5, so the
two forwards of 4 rows a split runs looked dearer than the one of 8 they replace.

Shapes do not keep their prices for an hour, nor move together: in run N the end-of-run
table priced 8 rows of one token at 310-327 ms where tables timed an hour before said
247-249, while 4 rows of 4 tokens barely moved. So with category workloads the bench also
times a *near* table of each category's shapes right after the category has run under
every configuration (``near_prices``), and prices each category's forwards, plain
decoding's and every configuration's alike, by its own near table; the overall figure sums
the categories so priced. The end-of-run table's figures are kept beside them
(``end_table``). A table timed apart still holds each row on a copy of one prompt, and
there a split of 8 rows can look cheaper than the real forwards made it; so where the
runs timed their forwards by shape, the bench prices them a third way, each shape at the
mean time its forwards took as the category's runs ran them (``situ_prices``, ``in_situ``).

Outputs part from plain decoding's where batch shape moves llama.cpp's logits, and their
lengths part with them; a request that ends sooner leaves fewer rows in each later
forward, and each token costs more. So beside the priced ratio the bench gives one with
outputs matched (``matched_ratios``): each run's forwards against what plain decoding's
steps would cost for the very outputs it gave. In run M the gated-off draft, which
decodes plainly, priced 0.958 of plain on qa, its outputs 6% shorter; re-timed in rounds,
0.996, so there the table, not the lengths, made most of the gap.

What pricing leaves out, and the wall-clock figures keep: the time outside the target's
forwards (drafting, the vote and bookkeeping, about 1% of a round on this CPU; a draft
model's own forwards when it drafts or explores); the cost of attention over contexts
longer or shorter than the price table's prompt; and how a forward's tokens were spread
over its rows (one request's long draft beside three single tokens is priced as four
even rows).

The repeats' own figures live here too (``repeat_figures``): with ``--repeats``, each
repeat's clock ratio to plain decoding in the same repeat, their median, and how far plain
decoding's own repeats of a category lie apart.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from coinfer.bench.collective_workloads import WorkloadPart, paired_ratios
from coinfer.bench.decode import spread_tokens, timed_forward
from coinfer.models import SteerableModel

__all__ = [
    "compared",
    "forward_prices",
    "forwards_by_category",
    "matched_ratios",
    "median",
    "near_prices",
    "paired_category_ratios",
    "plain_steps_ms",
    "priced_figures",
    "priced_rates",
    "priced_ratios",
    "repeat_figures",
    "shapes_to_price",
    "situ_prices",
    "sizes_seen",
]

Sizes = Mapping[str, float]  # tokens in a forward (a JSON key) -> forwards
Rows = dict[tuple[str, int], dict[str, Any]]  # (configuration, batch size) -> row
Near = Mapping[str, Mapping[str, float]]  # category -> its near price table (``near_prices``)
PRICE_ROUNDS = 5  # rounds of the price table, each timing every shape once (``forward_prices``)


def forwards_by_category(
    records: Sequence[dict[str, Any]], key: str = "workload_forwards"
) -> dict[str, list[Any]]:
    """Per category, from the runs of one configuration in order: each run's verifying
    forwards by size (``key`` ``workload_shapes``: by shape; ``workload_lengths``: its
    requests' tokens after their first) (category workloads only)."""
    out: dict[str, list[Any]] = {}
    for record in records:
        for category, value in (record.get(key) or {}).items():
            out.setdefault(category, []).append(copy.copy(value))
    return out


def _forwards(row: dict[str, Any]) -> tuple[list[Sizes], dict[str, list[Sizes]]]:
    """A row's verifying forwards per run and per category and run: by shape (``"4x12"``:
    4 rows, 12 tokens) where its runs recorded shapes, else by tokens (``"12"``)."""
    if row.get("forward_shapes_runs"):
        return row["forward_shapes_runs"], row.get("shapes_by_category_runs") or {}
    return row.get("forward_sizes_runs") or [], row.get("forwards_by_category_runs") or {}


def sizes_seen(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Every forward's size or shape in the rows' runs, overall and per category, fewest
    rows then fewest tokens first."""
    seen: set[str] = set()
    for row in rows:
        runs, by_category = _forwards(row)
        for sizes in [*runs, *(s for r in by_category.values() for s in r)]:
            seen.update(sizes)
    return sorted(seen, key=_shape)


def _shape(key: str) -> tuple[int, int]:
    """(rows, tokens) of a forward's key: ``"4x12"``, or ``"12"`` for one row."""
    rows, _, tokens = key.rpartition("x")
    return int(rows or 1), int(tokens)


def forward_prices(
    target: SteerableModel, prompt: list[int], keys: Sequence[str], rounds: int = PRICE_ROUNDS
) -> dict[str, float]:
    """Ms of the target's forward of each size or shape in ``keys`` (``sizes_seen``), each
    row on top of its own copy of ``prompt``: the median of ``rounds`` rounds, each of
    which times every shape once, after one round that warms caches and allocators."""
    shapes = {key: _shape(key) for key in keys}
    if not shapes:
        return {}
    seqs = [target.new_sequence() for _ in range(max(rows for rows, _ in shapes.values()))]
    try:
        target.extend_many([(seq, prompt) for seq in seqs], last_only=True)
        times: dict[str, list[float]] = {key: [] for key in shapes}
        for measured in range(rounds + 1):
            for key, (rows, tokens) in shapes.items():
                seconds = timed_forward(target, spread_tokens(seqs[:rows], prompt, tokens), len(prompt))
                if measured:
                    times[key].append(seconds)
        return {key: round(1000 * statistics.median(t), 3) for key, t in times.items()}
    finally:
        for seq in seqs:
            target.release(seq)


def _priced_ms(sizes: Sizes, prices: Mapping[str, float]) -> float | None:
    """The forwards' summed price, or None where a size has no price."""
    if any(n not in prices for n in sizes):
        return None
    return sum(count * prices[n] for n, count in sizes.items())


def priced_rates(
    row: dict[str, Any], prices: Mapping[str, float], near: Near | None = None
) -> dict[str, list[float]]:
    """A row's priced decode rate (tokens per priced second) of each run, overall
    (``"all"``) and per category where its runs ran each category alone. With ``near``
    tables, each category's forwards are priced by the category's own table, and the
    overall rate is the categories' tokens over their summed prices."""
    out: dict[str, list[float]] = {}
    forwards, by_category = _forwards(row)
    by_tokens = row.get("by_category_runs") or {}
    parts: dict[str, list[tuple[float, float | None]]] = {}
    for category, runs in by_category.items():
        table = _table(category, prices, near)
        tokens = [t for t, _ in by_tokens.get(category, [])]
        parts[category] = [(t, _priced_ms(sizes, table)) for t, sizes in zip(tokens, runs, strict=False)]
        rates = [1000 * t / ms for t, ms in parts[category] if ms]
        if rates and len(rates) == len(runs):
            out[category] = rates
    if near:
        out.update(_summed_rates(parts))
        return out
    tokens_runs = row.get("decode_tokens_runs") or []
    for tokens, sizes in zip(tokens_runs, forwards, strict=False):
        ms = _priced_ms(sizes, prices)
        if ms:
            out.setdefault("all", []).append(1000 * tokens / ms)
    return out


def _table(category: str, prices: Mapping[str, float], near: Near | None) -> Mapping[str, float]:
    """The table that prices ``category``: its own near one where ``near`` is given (an
    empty one, so none of its forwards is priced, where it has none), else ``prices``."""
    return near.get(category, {}) if near else prices


def _summed_rates(parts: Mapping[str, list[tuple[float, float | None]]]) -> dict[str, list[float]]:
    """``"all"``: each run's tokens over its forwards' prices, summed over the categories,
    where every category ran equally often and was priced in every run."""
    counts = {len(runs) for runs in parts.values()}
    if len(counts) != 1 or any(not ms for runs in parts.values() for _, ms in runs):
        return {}
    runs = range(counts.pop())
    return {
        "all": [
            1000 * sum(p[i][0] for p in parts.values()) / sum(p[i][1] or 0.0 for p in parts.values())
            for i in runs
        ]
    }


def priced_ratios(
    mine: dict[str, Any], plain: dict[str, Any], prices: Mapping[str, float], near: Near | None = None
) -> dict[str, list[float]]:
    """Per category (and ``"all"``), each run's priced decode rate over plain decoding's
    in the same repeat (each category by its ``near`` table, where given)."""
    theirs = priced_rates(plain, prices, near)
    out: dict[str, list[float]] = {}
    for category, rates in priced_rates(mine, prices, near).items():
        base = theirs.get(category, [])
        if len(base) == len(rates):
            out[category] = [round(a / b, 3) for a, b in zip(rates, base, strict=True)]
    return out


def plain_steps_ms(lengths: Sequence[int], prices: Mapping[str, float]) -> float | None:
    """What plain decoding's forwards cost for requests that start together and decode
    ``lengths`` tokens each: at each step one forward of one token for every request still
    decoding, r of them priced as ``"rxr"``; None where a step's shape has no price."""
    total = 0.0
    for step in range(1, max(lengths, default=0) + 1):
        rows = sum(1 for n in lengths if n >= step)
        price = prices.get(f"{rows}x{rows}")
        if price is None:
            return None
        total += price
    return total


def _matched_parts(
    row: dict[str, Any], prices: Mapping[str, float], batch: int, near: Near | None = None
) -> dict[str, list[Any]]:
    """Per category, each run's (plain steps' price of its outputs, its forwards' price),
    where its requests all started together (no more of them than ``batch``)."""
    shapes = row.get("shapes_by_category_runs") or {}
    out: dict[str, list[Any]] = {}
    for category, runs in (row.get("lengths_by_category_runs") or {}).items():
        table = _table(category, prices, near)
        pairs = [
            (plain_steps_ms(lengths, table), _priced_ms(sizes, table))
            for lengths, sizes in zip(runs, shapes.get(category, []), strict=False)
            if len(lengths) <= batch
        ]
        if pairs and len(pairs) == len(runs) and all(a and b for a, b in pairs):
            out[category] = pairs
    return out


def matched_ratios(
    mine: dict[str, Any],
    plain: dict[str, Any],
    prices: Mapping[str, float],
    batch: int,
    near: Near | None = None,
) -> dict[str, list[float]]:
    """Per category (and ``"all"``, the categories summed), each run's *output-matched*
    priced ratio: how many times less its forwards cost than plain decoding's would for
    the outputs it gave (``plain_steps_ms``), over the same figure of plain decoding's run
    in the same repeat (whose judge splits forwards too). Batch shape moves llama.cpp's
    logits, so outputs part from plain's, and their lengths with them: requests that end
    sooner leave fewer rows per forward, and each token costs more, whatever the engine
    did. This ratio leaves that out; ``priced_ratios`` keeps it. With ``near`` tables, each
    category is priced by its own."""
    ours, theirs = _matched_parts(mine, prices, batch, near), _matched_parts(plain, prices, batch, near)
    both = [c for c, runs in ours.items() if len(theirs.get(c, [])) == len(runs)]
    out: dict[str, list[float]] = {}
    for category in both:
        pairs = zip(ours[category], theirs[category], strict=True)
        out[category] = [round((e / c) / (pe / pc), 3) for (e, c), (pe, pc) in pairs]
    if both and len({len(ours[c]) for c in both}) == 1:
        out["all"] = [
            round(_gain([ours[c][i] for c in both]) / _gain([theirs[c][i] for c in both]), 3)
            for i in range(len(ours[both[0]]))
        ]
    return out


def _gain(parts: Sequence[tuple[float, float]]) -> float:
    """Plain steps' summed price over the forwards' summed price."""
    return sum(e for e, _ in parts) / sum(c for _, c in parts)


def shapes_to_price(rows: Sequence[dict[str, Any]], batch: int) -> list[str]:
    """The shapes a batch size's price table times: every one the rows' runs recorded
    (``sizes_seen``), and plain decoding's steps of one to ``batch`` rows, by which
    ``matched_ratios`` prices each run's outputs."""
    return _with_plain_steps(sizes_seen(rows), batch)


def _with_plain_steps(seen: Iterable[str], rows: int) -> list[str]:
    """``seen`` and plain decoding's steps of one to ``rows`` rows, fewest rows first."""
    return sorted(set(seen) | {f"{r}x{r}" for r in range(1, rows + 1)}, key=_shape)


def near_prices(
    target: SteerableModel, prompt: list[int], parts: Sequence[WorkloadPart], batch: int, rounds: int
) -> dict[str, float]:
    """One category's near price table, timed right after the category ran under every
    configuration (``parts``, each a run of it): every shape those runs' forwards took, and
    plain decoding's steps of as many rows as its requests filled, each row on top of
    ``prompt`` (the category's first)."""
    seen = [
        key
        for part in parts
        if part.responses
        for key in part.responses[0].extras.get("forward_shapes") or {}
    ]
    rows = min(batch, max((len(part.indices) for part in parts), default=0))
    return forward_prices(target, prompt, _with_plain_steps(seen, rows), rounds)


def paired_category_ratios(by: Rows, name: str, batch: int) -> dict[str, list[float]]:
    """Per category, each repeat's decode rate of ``name`` over plain decoding's in the
    same repeat (category workloads only)."""
    plain = by.get(("plain", batch), {}).get("by_category_runs") or {}
    return paired_ratios(by.get((name, batch), {}).get("by_category_runs") or {}, plain)


def repeat_figures(by: Rows, batch: int) -> dict[str, Any]:
    """With repeats: per configuration, the median of each repeat's decode rate over plain
    decoding's in the same repeat, and per category every repeat's ratio; per category,
    plain decoding's fastest repeat over its slowest (what identical work varies by)."""
    plain = by.get(("plain", batch))
    if not plain or len(plain.get("decode_runs") or []) < 2:
        return {}
    names = compared(by, batch)
    decode = {}
    for name in names:
        runs = by[(name, batch)].get("decode_runs") or []
        if len(runs) == len(plain["decode_runs"]) and all(plain["decode_runs"]):
            decode[name] = median([a / p for a, p in zip(runs, plain["decode_runs"], strict=True)])
    spread = {
        c: round(max(t / s for t, s in runs) / min(t / s for t, s in runs), 3)
        for c, runs in (plain.get("by_category_runs") or {}).items()
        if len(runs) > 1 and all(t and s > 0 for t, s in runs)
    }
    return {
        "decode_ratio_median": decode,
        "per_category_ratios": {n: paired_category_ratios(by, n, batch) for n in names},
        "plain_fastest_over_slowest": spread,
    }


def median(values: Sequence[float]) -> float:
    """The median, to three places (the summary's precision)."""
    return round(statistics.median(values), 3)


def priced_figures(
    by: Rows, batch: int, prices: Mapping[str, float] | None, near: Near | None = None
) -> dict[str, Any]:
    """Per configuration, its priced ratios to plain decoding (``priced_ratios``) and the
    output-matched ones (``matched_ratios``): every repeat's, per category and overall
    (``"all"``), and their medians; and the price table. Where every category plain
    decoding ran has a ``near`` table, those price the figures, and the end-of-run table's
    are kept under ``end_table``; where the runs timed their own forwards, the figures
    priced by those times (``situ_prices``) under ``in_situ``."""
    plain = by.get(("plain", batch))
    if not plain or not prices:
        return {}
    ran = set(_forwards(plain)[1])
    out = _figures(by, batch, prices, None)
    if near and ran and ran <= set(near):
        end = out
        out = _figures(by, batch, prices, {c: near[c] for c in ran})
        out.update(forward_ms_near=dict(near), end_table={k: end[k] for k in ("median", "matched_median")})
    situ = {c: situ_prices(by, batch, c) for c in ran}
    if ran and all(situ.values()):
        figures = _figures(by, batch, prices, situ)
        out["in_situ"] = {
            "median": figures["median"],
            "matched_median": figures["matched_median"],
            "forward_ms": situ,
        }
    return out


def situ_prices(by: Rows, batch: int, category: str) -> dict[str, float]:
    """A category's *in-situ* price table: per shape, the mean ms of the forwards of it
    that the runs at ``batch`` timed as they ran (plain decoding's and every
    configuration's pooled, so each is priced alike; slow spells count in). A table timed
    apart holds each row on a copy of one prompt in a cache holding only those; the real
    forwards run over the category's own contexts, in a cache their whole batch fills, and
    there a split saves less (plain decoding of followup at batch 8, traced after run Q:
    two forwards of 4 rows took 0.957 of one of 8 as they ran; Q's near table said 0.825).
    A shape only one configuration ran is priced by its own clock."""
    forwards: dict[str, int] = {}
    ms_summed: dict[str, float] = {}
    for name in ("plain", *compared(by, batch)):
        row = by.get((name, batch)) or {}
        shapes = (row.get("shapes_by_category_runs") or {}).get(category, [])
        times = (row.get("shape_ms_by_category_runs") or {}).get(category, [])
        for counts, ms in zip(shapes, times, strict=False):
            for key, total in ms.items():
                forwards[key] = forwards.get(key, 0) + counts.get(key, 0)
                ms_summed[key] = ms_summed.get(key, 0.0) + total
    return {key: round(t / forwards[key], 3) for key, t in ms_summed.items() if forwards[key]}


def _figures(by: Rows, batch: int, prices: Mapping[str, float], near: Near | None) -> dict[str, Any]:
    plain = by[("plain", batch)]
    names = compared(by, batch)
    ratios = {n: priced_ratios(by[(n, batch)], plain, prices, near) for n in names}
    matched = {n: matched_ratios(by[(n, batch)], plain, prices, batch, near) for n in names}
    return {
        "median": {n: {c: median(v) for c, v in r.items()} for n, r in ratios.items()},
        "ratios": ratios,
        "matched_median": {n: {c: median(v) for c, v in r.items()} for n, r in matched.items() if r},
        "matched_ratios": matched,
        "forward_ms": dict(prices),
    }


def compared(by: Rows, batch: int) -> list[str]:
    """The configurations at ``batch`` that are compared with plain decoding."""
    return [n for n, b in by if b == batch and n not in ("plain", "default") and not n.startswith("sweep")]
