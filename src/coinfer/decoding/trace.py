"""One trace format for every engine: what a run did, step by step, as JSON.

A ``TraceRecorder`` reads an engine's ``Response`` stream (nothing else) and keeps, per
step, its time, tokens, the drafts verified and kept, and the step's text cut into
*spans* by where the tokens came from:

* ``draft``: a draft model's token the target kept (``ngram``: an n-gram draft's);
* ``target``: the target's own token (plain decoding, or the bonus after a draft held);
* ``rectified``: the target's token in place of a draft it rejected;
* ``outline``: a point's text written in outline decoding (Jupiter);
* ``agreed`` / ``device`` / ``cloud`` / ``resampled``: DRAGON's token, by whose draft
  the aggregation accepted (both, one side's, neither).

Protocol steps (Minion/MinionS) keep their trace entry as ``event``; DRAGON's steps keep
each side's verdict as ``sides``. ``finish`` adds the run's text, stats and extras. The
file (``save``) is what ``coinfer view`` and the server's ``/traces/<id>`` show.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Generator, Iterable, Sequence
from pathlib import Path
from typing import Any

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.response import Response
from coinfer.errors import ConfigError

__all__ = ["FORMAT", "ORIGINS", "TraceRecorder", "load_trace", "origin_counts", "recorded", "save_trace"]

FORMAT = "coinfer-trace"
VERSION = 1
ORIGINS = ("draft", "ngram", "target", "rectified", "outline", "agreed", "device", "cloud", "resampled")


class TraceRecorder:
    """Builds one run's trace from its responses (see the module).

    ``detokenize``: the target's, to cut a step's text at the token where its origin
    changes; without it a step's text is one span of its last token's origin."""

    def __init__(
        self,
        engine: str,
        *,
        model: str,
        draft: str | None = None,
        prompt: str | None = None,
        detokenize: Callable[[Sequence[int]], str] | None = None,
    ) -> None:
        self.head: dict[str, Any] = {"format": FORMAT, "version": VERSION, "engine": engine,
                                     "model": model, "draft": draft, "prompt": prompt}  # fmt: skip
        self.steps: list[dict[str, Any]] = []
        self._detok = IncrementalDetokenizer(detokenize) if detokenize is not None else None
        self._start = time.perf_counter()
        self._drafted = self._accepted = 0
        self._text: list[str] = []
        self._last: Response | None = None

    def add(self, response: Response) -> None:
        """One step of the run."""
        drafted = response.stats.drafted - self._drafted
        accepted = response.stats.accepted - self._accepted
        self._drafted, self._accepted = response.stats.drafted, response.stats.accepted
        at = round(time.perf_counter() - self._start, 4)
        step: dict[str, Any] = {"at_s": at, "tokens": len(response.tokens), "drafted": drafted,
                                "accepted": accepted}  # fmt: skip
        origins = self.token_origins(response, drafted, accepted)
        step["spans"] = self.spans(response, origins)
        for key in ("event", "point"):
            if key in response.extras:
                step[key] = response.extras[key]
        if "decision" in response.extras:
            step["sides"] = dict(response.extras["decision"])
        self.steps.append(step)
        self._text.append(response.text)
        self._last = response

    def token_origins(self, response: Response, drafted: int, accepted: int) -> list[str]:
        """Where each of the step's tokens came from."""
        n = len(response.tokens)
        if "point" in response.extras:
            return ["outline"] * n
        if "decision" in response.extras:
            return [_aggregated(response.extras["decision"])] * n
        kept = min(accepted, n)
        draft = "ngram" if str(self.head.get("draft") or "").startswith("ngram") else "draft"
        own = "rectified" if drafted > accepted else "target"
        return [draft] * kept + [own] * (n - kept)

    def spans(self, response: Response, origins: list[str]) -> list[list[Any]]:
        """``[origin, text, tokens]`` runs of the step's text."""
        if not response.tokens:
            return [["target", response.text, 0]] if response.text else []
        if self._detok is None or "point" in response.extras:
            return [[origins[-1], response.text, len(origins)]]
        out: list[list[Any]] = []
        for token, origin in zip(response.tokens, origins, strict=True):
            piece = self._detok.push(token)
            if out and out[-1][0] == origin:
                out[-1][1] += piece
                out[-1][2] += 1
            else:
                out.append([origin, piece, 1])
        if response.finish_reason is not None:
            out[-1][1] += self._detok.flush()
        return out

    def finish(self, **more: Any) -> dict[str, Any]:
        """The whole trace; ``more``: what the caller adds (cost, a baseline…)."""
        last = self._last
        return {
            **self.head,
            "text": "".join(self._text),
            "finish_reason": last.finish_reason if last else None,
            "stats": last.stats.as_dict() if last else {},
            "extras": last.extras if last else {},
            "steps": self.steps,
            **more,
        }


def _aggregated(decision: dict[str, bool]) -> str:
    device, cloud = bool(decision.get("device")), bool(decision.get("cloud"))
    return "agreed" if device and cloud else "device" if device else "cloud" if cloud else "resampled"


def recorded(
    responses: Iterable[Response], recorder: TraceRecorder | None
) -> Generator[Response, None, None]:
    """``responses`` passed on, each added to ``recorder`` (when there is one)."""
    for response in responses:
        if recorder is not None:
            recorder.add(response)
        yield response


def origin_counts(trace: dict[str, Any]) -> dict[str, int]:
    """Tokens per origin over the whole trace (what the viewer's legend shows)."""
    counts = dict.fromkeys(ORIGINS, 0)
    for step in trace.get("steps", []):
        for origin, _, n in step.get("spans", []):
            counts[origin] = counts.get(origin, 0) + int(n)
    return counts


def save_trace(trace: dict[str, Any], path: str | Path) -> Path:
    out = Path(path)
    try:
        out.write_text(json.dumps(trace, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write the trace to {out}: {exc}", hint="pick a writable path") from exc
    return out


def load_trace(path: str | Path) -> dict[str, Any]:
    """A trace file, checked to be one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        hint = "pass a file written by --trace"
        raise ConfigError(f"cannot read the trace {path}: {exc}", hint=hint) from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a coinfer trace", hint="pass a file written by --trace")
    if data.get("version") != VERSION:
        raise ConfigError(
            f"{path} is a version {data.get('version')} trace; this coinfer reads version {VERSION}",
            hint="write it again with this coinfer's --trace",
        )
    return data
