"""The shapes a static-cache forward runs at, and its capture as a CUDA graph.

A CUDA graph replays one fixed sequence of kernels over fixed buffers, so every forward
shape is captured apart, tens of forwards' worth of time each. The forwards on static
caches (``hf_static.HFStaticModel``, Jupiter's ``StaticStage``) therefore run at a few
widths and spans only: a width padded up to the next of ``WIDTHS`` (on a GPU a forward
costs nearly the same from 2 to 64 tokens), a span of attended columns that is a power of
two of at least ``MIN_SPAN``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["GRAPH_WIDTH", "MIN_SPAN", "WIDTHS", "capture_graph", "padded_width", "span_for"]

WIDTHS = (1, 2, 4, 8, 16, 32, 64, 80)  # the widths forwards are padded to
GRAPH_WIDTH = WIDTHS[-1]  # the widest forward captured as a graph (drafts, trees); prompts run directly
MIN_SPAN = 256


def padded_width(w: int) -> int:
    """The width a forward of ``w`` tokens runs at when widths are padded: the next of
    ``WIDTHS`` (each new width costs a compile and a capture, about 0.1 s on a 1.5B).
    Wider ones stay as they are."""
    return next((x for x in WIDTHS if x >= w), w)


def span_for(needed: int, n_ctx: int) -> int:
    """The columns a forward attends over: the power of two (at least ``MIN_SPAN``) that
    covers ``needed``, at most the context."""
    span = MIN_SPAN
    while span < needed:
        span *= 2
    return min(span, n_ctx)


def capture_graph(torch: Any, pool: Any, run: Callable[[], Any]) -> tuple[Any, Any]:
    """``run`` (a forward over fixed buffers) warmed up on a side stream, then captured into
    ``pool`` (a ``graph_pool_handle`` its model's graphs share) and replayed once: the
    graph and the outputs its replays write. The warm-up must be harmless to repeat: a
    forward that writes the same cache columns with the same values is."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        outputs = run()
    graph.replay()
    return graph, outputs
