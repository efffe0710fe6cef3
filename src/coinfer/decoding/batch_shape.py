"""How many draft tokens a batched verification step takes (``batch_lengths``), and what
the step costs by its shape, not only its size.

A batch's forward is priced by the target's cost curve (seconds of one forward over
``n`` tokens), but a backend does not always run a batch as one forward. llama.cpp with
a cache per sequence runs several sequences together only as an equal split (as many
rows from each) over streams in increasing, consecutive order; a batch whose requests
bring different numbers of rows (1 for a request with nothing to verify, 1 + its draft
for one that drafted) runs as one pass per row count, and each of those again splits
wherever the streams are not consecutive. ``passes`` (``SteerableModel.pass_rows``)
says how: the rows of each pass, from the rows each request brings. On the AVX2 machine
of ``docs/bench/serve`` (8 requests, a cache each), rows 1,2,1,2,... (12 rows; each row
count on every other stream, so 8 passes) cost 795 ms where 2 rows for every request (16
rows, one pass) cost 580; 4 rows on streams 0,2,4,6 cost 738 ms where on 0-3 they cost
568 (``one-off/batch_shapes.txt``).

So a step is priced as the sum of its passes (``step_price``), and as the cheaper of its
ragged shape and its *evened* one, where every request brings as many rows as the
longest (``evened``): the rows a request adds past its own draft are more of its
proposal where it has one (verified like any draft token), and otherwise filler whose
outputs go unused and which the cache rolls back. Evening never changes a request's
tokens: only its draft's agreed prefix is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["Passes", "batch_lengths", "evened", "shaped_price", "step_price"]

# the rows of each pass a backend runs for a batch, from the rows each request brings
Passes = Callable[[Sequence[int]], Sequence[int]]


def step_price(rows: Sequence[int], passes: Passes, cost: Callable[[int], float]) -> float:
    """Seconds of a step whose requests bring ``rows`` each: its passes' prices summed."""
    return sum(cost(n) for n in passes(rows) if n)


def evened(
    rows: Sequence[int], passes: Passes, cost: Callable[[int], float], most: int | None = None
) -> int | None:
    """The row count every request of the step should bring (the longest's), where that
    one shape is priced below the ragged one and, with ``most``, brings at most that many
    rows in all; None where the step is even already or evening it costs more."""
    width = _even_width(rows, most)
    if width is None:
        return None
    return width if step_price([width] * len(rows), passes, cost) < step_price(rows, passes, cost) else None


def shaped_price(
    rows: Sequence[int], passes: Passes, cost: Callable[[int], float], most: int | None = None
) -> float:
    """Seconds of a step whose requests bring ``rows`` each, run in the cheaper of its
    ragged and its evened shape (``evened``, with the same ``most``)."""
    ragged = step_price(rows, passes, cost)
    width = _even_width(rows, most)
    return ragged if width is None else min(ragged, step_price([width] * len(rows), passes, cost))


def _even_width(rows: Sequence[int], most: int | None) -> int | None:
    """The longest's row count, where evening to it changes the step and stays within ``most``."""
    width = max(rows, default=0)
    if width <= 1 or all(n == width for n in rows) or (most is not None and width * len(rows) > most):
        return None
    return width


def batch_lengths(
    survivals: Sequence[Sequence[float]],
    cost: Callable[[int], float],
    *,
    required_gain: float = 1.0,
    explore: bool = False,
    floor: float = 0.0,
    most: int | None = None,
    price: Callable[[Sequence[int]], float] | None = None,
) -> list[int]:
    """How many tokens of each request's draft to verify in one batched forward.

    ``survivals[j][i - 1]`` is the chance that the first i tokens of request j's draft all
    hold (never rising with i); ``cost(n)`` the seconds of a forward over n tokens. With b
    requests, verifying t draft tokens yields b plus the sum of their survivals, for
    ``cost(b + t)``. For each t the best tokens are the t highest survivals, which are
    prefixes of the drafts (ties go to the earlier position), so the choice is the t that
    maximises ``(b + top-t sum) / cost(b + t)``: one request's long confident copy is
    worth a dearer forward, where every request's short guess is not. t = 0 (plain
    decoding) unless the best promises ``required_gain`` more. ``floor``: only the t at
    which every request still expects at least that share of its plain-decoding rate,
    ``(1 + its kept survivals) / cost(b + t) >= floor / cost(b)``. A round is one forward
    for every request, so the tokens one request's copy adds slow every other request's
    tokens; on a compute-bound CPU, the forward that maximised the batch's throughput
    decoded the requests with nothing to copy at 0.42-0.85x of their plain rate
    (``docs/bench/collective``). ``explore``: one token more than the choice when that is
    predicted within 10% of it and meets the floor, so the curve past the choice stays
    measured. With one request it is ``AdaptiveDraftLength``'s rate, maximised over the
    tokens actually proposed. ``most``: the forward's tokens at most, the requests' own
    ones included (None: no limit). ``price``: the seconds of the step from the rows each
    request brings (1 + its draft tokens), where its shape matters and not only its size
    (``batch_shape.shaped_price``); by default ``cost`` of their sum."""
    b = len(survivals)
    if not b:
        return []
    ranked = sorted(
        ((p, i, j) for j, s in enumerate(survivals) for i, p in enumerate(s)), key=lambda x: (-x[0], x[1])
    )
    if most is not None:
        ranked = ranked[: max(0, most - b)]
    if price is None:
        price = lambda rows: cost(sum(rows))  # noqa: E731
    plain = price([1] * b)
    rates, fair, gained, mine, rows = [b / plain], [True], float(b), [1.0] * b, [1] * b
    for p, _, j in ranked:
        gained += p
        mine[j] += p
        rows[j] += 1
        forward = price(rows)
        rates.append(gained / forward)
        fair.append(min(mine) / forward >= floor / plain)
    best = max((t for t in range(len(rates)) if fair[t]), key=lambda t: (rates[t], -t))
    if rates[best] < required_gain * rates[0]:
        best = 0
    elif explore and best + 1 < len(rates) and fair[best + 1] and rates[best + 1] >= 0.9 * rates[best]:
        best += 1
    out = [0] * b
    for _, _, j in ranked[:best]:
        out[j] += 1
    return out
