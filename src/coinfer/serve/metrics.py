"""``/metrics`` in Prometheus's text format (``prometheus_client``, one registry per server):
requests by model and outcome, tokens read and written, answers to requests with tools
as calls or as text, draft tokens verified and accepted, requests waiting or running per
model, histograms of the request's time and of the time to its first token, and, for a
model on static caches (``HFStaticModel``), the forwards that ran over gaps between a
batch's slots (requests that finished mid-batch) and the empty rows they ran."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE_LATEST", "ServerMetrics"]

_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


def _reading(obj: Any, field: str) -> Callable[[], float]:
    """A gauge's function: ``obj``'s ``field`` as it stands when scraped."""
    return lambda: float(getattr(obj, field))


class ServerMetrics:
    def __init__(self, depths: Mapping[str, Any]) -> None:
        """``depths``: model name -> its served model (``depth``: requests waiting or running)."""
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("coinfer_requests", "Requests answered", ["model", "status"], registry=r)
        self.prompt_tokens = Counter("coinfer_prompt_tokens", "Prompt tokens read", ["model"], registry=r)
        self.completion_tokens = Counter(
            "coinfer_completion_tokens", "Completion tokens written", ["model"], registry=r
        )
        self.cached_tokens = Counter(
            "coinfer_prompt_tokens_cached", "Prompt tokens an earlier request's cache held (prefix hits)",
            ["model"], registry=r,
        )  # fmt: skip
        self.tool_answers = Counter(
            "coinfer_tool_answers", "Answers to requests with tools, by whether they were calls or text",
            ["model", "outcome"], registry=r,
        )  # fmt: skip
        self.drafted = Counter("coinfer_draft_tokens", "Draft tokens verified", ["model"], registry=r)
        self.accepted = Counter("coinfer_accepted_tokens", "Draft tokens accepted", ["model"], registry=r)
        self.seconds = Histogram(
            "coinfer_request_seconds", "A request's time", ["model"], buckets=_SECONDS, registry=r
        )
        self.ttft = Histogram(
            "coinfer_time_to_first_token_seconds", "Time to the first token", ["model"], buckets=_SECONDS,
            registry=r,
        )  # fmt: skip
        depth = Gauge("coinfer_queue_depth", "Requests waiting or running", ["model"], registry=r)
        live = Gauge(
            "coinfer_live_sequences", "Sequences holding cache cells (running, kept)", ["model"],
            registry=r,
        )  # fmt: skip
        stored = Gauge(
            "coinfer_stored_cache_bytes", "Host memory of finished conversations' caches stored for reuse",
            ["model"], registry=r,
        )  # fmt: skip
        for name, served in depths.items():
            depth.labels(name).set_function(_reading(served, "depth"))
            model = getattr(served, "model", None)
            if model is not None and hasattr(model, "live_sequences"):
                live.labels(name).set_function(_reading(model, "live_sequences"))
            chat = getattr(served, "chat", None)
            if chat is not None and hasattr(chat, "stored_bytes"):
                stored.labels(name).set_function(_reading(chat, "stored_bytes"))
        self._slot_gaps(depths)

    def _slot_gaps(self, served: Mapping[str, Any]) -> None:
        """Gauges of the static caches' gap forwards and rows, for the models that keep them."""
        r = self.registry
        forwards = Gauge(
            "coinfer_slot_gap_forwards", "Forwards run over gaps between a batch's cache slots", ["model"],
            registry=r,
        )  # fmt: skip
        rows = Gauge("coinfer_slot_gap_rows", "Empty rows those forwards ran", ["model"], registry=r)
        for name, s in served.items():
            model = getattr(s, "model", None)
            if hasattr(model, "gap_forwards"):
                forwards.labels(name).set_function(_reading(model, "gap_forwards"))
                rows.labels(name).set_function(_reading(model, "gap_rows"))

    def answered(self, model: str, status: int) -> None:
        self.requests.labels(model, str(status)).inc()

    def tool_answer(self, model: str, *, called: bool) -> None:
        """A sample of a request with tools ended as calls, or as text (a model that never
        calls shows here as text only)."""
        self.tool_answers.labels(model, "calls" if called else "text").inc()

    def finished(self, model: str, *, seconds: float, ttft: float | None, usage: Any, stats: Any) -> None:
        """A request that ran to its end: its time, tokens and the drafts' record."""
        self.seconds.labels(model).observe(seconds)
        if ttft is not None:
            self.ttft.labels(model).observe(ttft)
        if usage is not None:
            self.prompt_tokens.labels(model).inc(usage.prompt_tokens)
            self.completion_tokens.labels(model).inc(usage.completion_tokens)
            self.cached_tokens.labels(model).inc(getattr(usage, "cached_tokens", 0))
        for s in stats:
            self.drafted.labels(model).inc(s.drafted)
            self.accepted.labels(model).inc(s.accepted)

    def text(self) -> bytes:
        return generate_latest(self.registry)
