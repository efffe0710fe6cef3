"""The trace recorder: where each token came from, read from an engine's responses
alone (``DecodeStats`` counts and ``extras``), and the file's checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coinfer.decoding.response import DecodeStats, Response
from coinfer.decoding.trace import TraceRecorder, load_trace, origin_counts, recorded, save_trace
from coinfer.errors import ConfigError

WORDS = ["a", "b", "c", "d", "e", "f", "g", "h"]


def detok(ids: list[int]) -> str:
    return "".join(WORDS[i] for i in ids)


def _rounds(rounds: list[tuple[list[int], int, int]], extras: list[dict] | None = None) -> list[Response]:  # type: ignore[type-arg]
    """A speculative stream: (tokens, drafted, accepted) per round, the first the prefill."""
    stats, out = DecodeStats(), []
    for i, (tokens, drafted, accepted) in enumerate(rounds):
        stats.prefilled() if i == 0 else stats.verified(drafted, accepted)
        stats.emitted(len(tokens))
        finish = "length" if i == len(rounds) - 1 else None
        more = extras[i] if extras else {}
        out.append(Response(detok(tokens), tokens, stats.snapshot(), finish, extras=more))
    return out


def test_kept_drafts_the_targets_own_and_rectified_tokens_are_told_apart() -> None:
    recorder = TraceRecorder("speculative", model="t", draft="qwen-0.5b", detokenize=detok)
    # prefill; 3 drafted, 3 kept (+ the bonus); 4 drafted, 1 kept (+ a rectification)
    for r in recorded(_rounds([([0], 0, 0), ([1, 2, 3, 4], 3, 3), ([5, 6], 4, 1)]), recorder):
        assert r.tokens
    trace = recorder.finish()
    assert [s["spans"] for s in trace["steps"]] == [
        [["target", "a", 1]],
        [["draft", "bcd", 3], ["target", "e", 1]],
        [["draft", "f", 1], ["rectified", "g", 1]],
    ]
    assert trace["text"] == "abcdefg" and trace["finish_reason"] == "length"
    assert [(s["drafted"], s["accepted"]) for s in trace["steps"]] == [(0, 0), (3, 3), (4, 1)]
    counts = origin_counts(trace)
    assert (counts["draft"], counts["target"], counts["rectified"]) == (4, 2, 1)
    assert sum(counts.values()) == trace["stats"]["n_tokens"] == 7


def test_an_ngram_drafts_tokens_are_ngram_and_a_cut_round_keeps_only_drafts() -> None:
    recorder = TraceRecorder("speculative", model="t", draft="ngram", detokenize=detok)
    for r in _rounds([([0], 0, 0), ([1, 2], 5, 5)]):  # the budget cut the round after two drafts
        recorder.add(r)
    assert recorder.finish()["steps"][1]["spans"] == [["ngram", "bc", 2]]


def test_outline_points_dragon_sides_and_protocol_events_are_kept() -> None:
    recorder = TraceRecorder("mixed", model="t", detokenize=detok)
    extras = [{"point": 0}, {"decision": {"device": True, "cloud": False}},
              {"decision": {"device": False, "cloud": False}}]  # fmt: skip
    for r in _rounds([([0, 1], 0, 0), ([2], 0, 0), ([3], 0, 0)], extras):
        recorder.add(r)
    event = {"round": 1, "event": "jobs", "data": {"jobs": 2, "chunks": 1}}
    recorder.add(Response("", [], DecodeStats(), extras={"event": event}))
    steps = recorder.finish()["steps"]
    assert steps[0]["spans"] == [["outline", "ab", 2]] and steps[0]["point"] == 0
    assert steps[1]["spans"] == [["device", "c", 1]] and steps[1]["sides"] == {"device": True, "cloud": False}
    assert steps[2]["spans"][0][0] == "resampled"
    assert steps[3]["event"] == event and steps[3]["spans"] == []


def test_a_saved_trace_loads_and_other_files_are_refused(tmp_path: Path) -> None:
    recorder = TraceRecorder("speculative", model="t", detokenize=detok)
    for r in _rounds([([0], 0, 0), ([1], 0, 0)]):
        recorder.add(r)
    path = save_trace(recorder.finish(cost={"remote_usd": 0.0}), tmp_path / "run.json")
    assert load_trace(path)["cost"] == {"remote_usd": 0.0}
    (tmp_path / "other.json").write_text(json.dumps({"text": "hi"}))
    (tmp_path / "old.json").write_text(json.dumps({"format": "coinfer-trace", "version": 0}))
    (tmp_path / "bad.json").write_text("{")
    for name, needle in [("other", "not a coinfer trace"), ("old", "version 0"), ("bad", "cannot read"),
                         ("missing", "cannot read")]:  # fmt: skip
        with pytest.raises(ConfigError, match=needle):
            load_trace(tmp_path / f"{name}.json")
