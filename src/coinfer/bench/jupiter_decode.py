"""``coinfer bench jupiter-decode``: Jupiter's decoding ablation (paper 004 Table V) on part
1's setup, two devices of one core each: naive pipelined decoding, +OP (outline-based
pipeline-parallel decoding, the router choosing), and with ``--heads`` +SD and +SD+OP, on
list-style questions written for the suite (``data/jupiter/list_questions.json``: a tuned
and a held-out half) and on HumanEval prompts the heads did not train on (where the router
must fall back); and the router's choice on the list questions and on every HumanEval prompt.

Speed is the answer's tokens (the final text, tokenized) per second of decoding (the
request's time after its first token), and its inverse, the latency per token. Each
question runs once per system, the systems interleaved; ratios are per question, then
their median.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from coinfer.bench.report import write_json
from coinfer.errors import ConfigError

HUMANEVAL_PROMPTS = 8  # of the held-out HumanEval prompts, in the full run

__all__ = [
    "DecodeBenchConfig",
    "judge_answers",
    "list_questions",
    "rejudge",
    "router_rates",
    "run_decode_bench",
]


@dataclass(frozen=True)
class DecodeBenchConfig:
    out: str
    model: str = "qwen2.5-coder-0.5b"
    heads: str | None = None
    max_tokens: int = 192
    quick: bool = False
    devices: int = 2
    judge: str | None = "qwen2.5-coder-1.5b"

    def __post_init__(self) -> None:
        if self.max_tokens < 16 or self.devices < 1:
            raise ConfigError("max_tokens must be >= 16 and devices >= 1")


def list_questions() -> dict[str, list[str]]:
    """The suite's list-style questions: ``tuned`` and ``held_out``."""
    path = resources.files("coinfer.bench") / "data" / "jupiter" / "list_questions.json"
    data = json.loads(path.read_text())
    return {"tuned": list(data["tuned"]), "held_out": list(data["held_out"])}


def router_rates() -> dict[str, Any]:
    """How often the router takes the outline: per half of the list questions, and on
    HumanEval's prompts as they come and inside a chat request."""
    from coinfer.bench.workloads import humaneval_problems, humaneval_request
    from coinfer.engines.jupiter.outline import route

    def share(texts: list[str]) -> dict[str, Any]:
        chosen = [route(t).outline for t in texts]
        return {"outline": sum(chosen), "of": len(chosen), "rate": round(sum(chosen) / len(chosen), 3)}

    lists, code = list_questions(), [p["prompt"] for p in humaneval_problems()]
    chat = [humaneval_request(c) for c in code]
    return {
        **{k: share(v) for k, v in lists.items()},
        "humaneval": share(code),
        "humaneval_chat": share(chat),
    }


def _systems(config: DecodeBenchConfig) -> dict[str, dict[str, Any]]:
    """The ablation; outline decoding as a user gets it, the router choosing (``auto``)."""
    systems: dict[str, dict[str, Any]] = {
        "naive": {"decode": "naive"},
        "op": {"decode": "auto", "draft_heads": False},
    }
    if config.heads:
        systems |= {"sd": {"decode": "sd"}, "sd+op": {"decode": "auto"}}
    return systems


def _one(cluster: Any, question: str, config: DecodeBenchConfig, how: dict[str, Any]) -> dict[str, Any]:
    from coinfer.engines.jupiter import JupiterConfig, generate

    t0 = time.perf_counter()
    r = generate(cluster, question, config=JupiterConfig(max_tokens=config.max_tokens, **how))
    wall = time.perf_counter() - t0
    answer = len(cluster.text.tokenize(r.text))
    decode_s = max(wall - r.stats.ttft_s, 1e-9)
    return {
        "answer_tokens": answer, "generated": r.stats.n_tokens, "wall_s": round(wall, 3),
        "ttft_s": round(r.stats.ttft_s, 3), "tok_s": round(answer / decode_s, 3),
        "ms_per_token": round(1000 * decode_s / max(answer, 1), 1),
        "mean_accepted_length": round(r.stats.mean_accepted_length, 3), "rounds": r.stats.rounds,
        "points": len(r.extras.get("outline") or []),
        "decoded": r.extras.get("decoded", r.extras.get("decode")),
        "tree": r.extras.get("tree"), "text": r.text,
    }  # fmt: skip


def _questions(config: DecodeBenchConfig) -> list[tuple[str, str]]:
    """The list questions (both halves), then HumanEval prompts the heads did not train on
    (``head_training_prompts`` holds every fourth out), where the router must fall back."""
    from coinfer.bench.workloads import held_out_split, humaneval_problems, humaneval_request

    lists = list_questions()
    code = [humaneval_request(p["prompt"]) for p in held_out_split(humaneval_problems(), held_out=True)]
    if config.quick:
        chosen = [("tuned", lists["tuned"][0]), *[("held_out", q) for q in lists["held_out"][:3]]]
        return chosen + [("humaneval", q) for q in code[:2]]
    return [(half, q) for half in ("tuned", "held_out") for q in lists[half]] + [
        ("humaneval", q) for q in code[:HUMANEVAL_PROMPTS]
    ]


def _in_half(row: dict[str, Any], half: str) -> bool:
    """``all``: every list question (both halves), not the HumanEval prompts."""
    return row["half"] == half or (half == "all" and row["half"] != "humaneval")


def summarize(rows: list[dict[str, Any]], systems: list[str]) -> dict[str, Any]:
    """Per half and system: the median ratio of tokens/s to naive decoding's, and means."""
    out: dict[str, Any] = {}
    for half in ("tuned", "held_out", "all", "humaneval"):
        mine = [r for r in rows if _in_half(r, half)]
        if not mine:
            continue
        out[half] = {
            s: {
                "speedup_vs_naive": round(
                    statistics.median(r[s]["tok_s"] / r["naive"]["tok_s"] for r in mine), 3
                ),
                "tok_s": round(statistics.mean(r[s]["tok_s"] for r in mine), 3),
                "ms_per_token": round(statistics.mean(r[s]["ms_per_token"] for r in mine), 1),
                "mean_accepted_length": round(statistics.mean(r[s]["mean_accepted_length"] for r in mine), 3),
                "outline_taken": sum(r[s]["points"] > 0 for r in mine),
            }
            for s in systems
        }
        out[half]["questions"] = len(mine)
    return out


def run_decode_bench(config: DecodeBenchConfig, *, log: Callable[[str], None]) -> dict[str, Any]:
    from coinfer.bench.jupiter import JupiterBenchConfig, start_cluster
    from coinfer.models.heads import DraftHeads

    systems = _systems(config)
    cluster, workers = start_cluster(JupiterBenchConfig(out=config.out, model=config.model), config.devices,
                                     "jupiter", None)  # fmt: skip
    rows: list[dict[str, Any]] = []
    try:
        if config.heads:
            cluster.use_heads(DraftHeads.load(config.heads))
        for half, question in _questions(config):
            row: dict[str, Any] = {"half": half, "question": question}
            for name, how in systems.items():
                row[name] = _one(cluster, question, config, how)
                log(f"{half:9} {name:6} {row[name]['tok_s']:6.2f} tok/s  {' '.join(question.split())[:60]}")
            rows.append(row)
    finally:
        cluster.close()
        if workers is not None:
            workers.close()
    report = {"config": asdict(config), "router": router_rates(), "rows": rows,
              "summary": summarize(rows, list(systems))}  # fmt: skip
    if config.judge:
        report["judge"] = judge_answers(rows, config.judge, log=log)
    return write_report(report, config.out)


def write_report(report: dict[str, Any], out: str) -> dict[str, Any]:
    write_json(Path(out) / "results.json", report)
    return report


def judge_answers(
    rows: list[dict[str, Any]], judge_spec: str, *, log: Callable[[str], None]
) -> dict[str, Any]:
    """The outline's answer against naive decoding's, per question, by a pairwise judge in
    both orders (``bench.judge``); identical answers are a tie without asking. Each row
    gets its verdicts; the result is the summary per half."""
    from coinfer.bench.judge import judge_pair, summarize_pairs
    from coinfer.models.load import load_model

    judge = load_model(judge_spec, n_ctx=4096)
    try:
        for row in (r for r in rows if _in_half(r, "all")):
            outline, naive = row["op"]["text"], row["naive"]["text"]
            if outline == naive:
                row["judge"] = {"outcome": "tie", "identical": True}
            else:
                j = judge_pair(judge, row["question"], outline, naive)
                row["judge"] = {
                    "outcome": j.outcome, "identical": False,
                    "verdicts": [j.in_order.winner, j.swapped.winner],
                    "forced": [j.in_order.forced, j.swapped.forced],
                    "explanations": [j.in_order.text, j.swapped.text],
                }  # fmt: skip
            log(f"judge    {row['judge']['outcome']:12}  {row['question'][:60]}")
    finally:
        judge.close()
    names = {"first": "outline", "second": "naive"}
    summary = {
        half: summarize_pairs([r["judge"]["outcome"] for r in rows if _in_half(r, half)], **names)
        for half in ("tuned", "held_out", "all")
    }
    forced = sum(sum(r["judge"].get("forced", [])) for r in rows if "judge" in r)
    return {
        "model": judge_spec,
        "setup": "MT-Bench pair-v2, both orders",
        "forced_verdicts": forced,
        **summary,
    }


def rejudge(out: str, judge_spec: str, *, log: Callable[[str], None]) -> dict[str, Any]:
    """Judge the answers of an earlier run (``out``/results.json) again, in place."""
    path = Path(out) / "results.json"
    if not path.is_file():
        raise ConfigError(f"no results in {path}", hint="run coinfer bench jupiter-decode --out DIR first")
    report = json.loads(path.read_text())
    report["config"]["judge"] = judge_spec
    report["judge"] = judge_answers(report["rows"], judge_spec, log=log)
    return write_report(report, out)
