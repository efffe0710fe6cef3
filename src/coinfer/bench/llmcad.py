"""``coinfer bench llmcad``: a target larger than its memory budget (paper 002, §4).

Every system runs in a child process inside a memory cgroup the bench makes (``cgroup``),
the target's and the draft's page cache evicted first, so every page read is charged to
the budget; where no cgroup can be made the bench says so and stops. The budget is the
draft's weights plus a fraction (default ⅓) of the target's: ``draft + f × target`` in
file bytes, the same for every system. LLMCad and ``--draft auto`` also run with no budget.

Per system and prompt: per-token latency (decode time from the first token to the last,
over the tokens after the first), verifications (target forwards after the prefill) per
token, bytes read from storage per token after the first (the prefill's reads, a few
passes over the weights, show in the time to first token instead), the cgroup's peak memory, and ROUGE-L and
identity against the target alone (``std``). Prompts alternate between a *tuned* half
and a *held-out* half (nothing was tuned on the second); the summary gives both. A
system that runs more than twice as long as the target alone under the same budget (at
least 5 minutes) is stopped, what it finished kept, and reported as stopped.
Results: ``results.json`` (``summary``, ``runs``), ``results.md``, ``latency.png`` and, for
several fractions, ``budget.png``.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coinfer import catalog
from coinfer.bench.llmcad_systems import SYSTEMS
from coinfer.bench.report import environment, write_json, write_markdown
from coinfer.bench.workloads import build_suite, load_prompts
from coinfer.errors import BudgetError, ConfigError
from coinfer.sandbox.cgroup import MemoryCgroup, evict_page_cache

__all__ = ["LLMCadBenchConfig", "rouge_l", "run_llmcad_bench"]

UNBUDGETED = ("llmcad", "auto")
STOP_FLOOR_S = 300.0  # the least time any system gets, whatever the target alone took


@dataclass(frozen=True)
class LLMCadBenchConfig:
    out: str
    target: str = "qwen2.5-coder-1.5b"
    draft: str = "qwen2.5-coder-0.5b"
    max_tokens: int = 64
    quick: bool = False
    prompts: str | None = None
    budget_fraction: float = 0.33
    systems: tuple[str, ...] = SYSTEMS
    sp_k: int = 4
    ctx: int = 1024
    timeout_s: float = 3600
    runtime_allowance: int = 0  # bytes added to every budget (tests of tiny models: the interpreter's own)

    def __post_init__(self) -> None:
        unknown = set(self.systems) - set(SYSTEMS)
        if unknown or "std" not in self.systems or "llmcad" not in self.systems:
            raise ConfigError(
                f"systems must include std and llmcad and be among {', '.join(SYSTEMS)}",
                hint="drop the unknown names",
            )
        if not 0 < self.budget_fraction < 1:
            raise ConfigError(f"budget_fraction must be in (0, 1), got {self.budget_fraction}")

    def fractions(self) -> tuple[float, ...]:
        """The budgets measured: the chosen fraction, and in a full run 0.25 and 0.5 too."""
        return (self.budget_fraction,) if self.quick else tuple(sorted({0.25, self.budget_fraction, 0.5}))


def rouge_l(candidate: list[int], reference: list[int]) -> float:
    """ROUGE-L F1 of two token sequences (longest common subsequence)."""
    if not candidate or not reference:
        return float(candidate == reference)
    prev = [0] * (len(reference) + 1)
    for c in candidate:
        row = [0]
        for j, r in enumerate(reference):
            row.append(prev[j] + 1 if c == r else max(prev[j + 1], row[j]))
        prev = row
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(candidate), lcs / len(reference)
    return 2 * precision * recall / (precision + recall)


def _run_child(spec: dict[str, Any], budget: int | None, files: list[Path], timeout: float) -> dict[str, Any]:
    """One system over every prompt in a child process (in a cgroup of ``budget`` bytes),
    stopped after ``timeout`` seconds with the prompts it finished kept."""
    argv = [sys.executable, "-m", "coinfer.bench.llmcad_systems", json.dumps(spec)]
    peak, ooms = None, 0
    try:
        if budget is None:  # warm, as in use
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        else:
            for f in files:  # every page of the weights is read under the budget
                evict_page_cache(f)
            with MemoryCgroup(budget) as cg:
                try:
                    proc = cg.run(argv, timeout=timeout)
                finally:
                    peak, ooms = cg.peak(), cg.oom_kills()
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return {"rows": _rows(out), "peak_bytes": peak, "oom_kills": ooms,
                "error": f"stopped after {timeout:.0f} s"}  # fmt: skip
    error = None
    if proc.returncode != 0:
        error = "killed by the OOM killer" if ooms else (proc.stderr.strip().splitlines() or ["failed"])[-1]
    return {"rows": _rows(proc.stdout), "peak_bytes": peak, "oom_kills": ooms, "error": error}


def _rows(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _per_prompt(run: dict[str, Any], reference: dict[str, list[int]]) -> list[dict[str, Any]]:
    out = []
    for row in run["rows"]:
        n = len(row["tokens"])
        ref = reference.get(row["id"])
        out.append({
            "id": row["id"],
            "tokens": n,
            "latency_s": row["decode_s"] / (n - 1) if n > 1 else None,
            "verifications_per_token": row["verifications"] / n if n else None,
            "bytes_read_per_token": _per(row.get("decode_bytes_read"), n - 1),
            "ttft_s": row.get("ttft_s"),
            "identical": ref is not None and row["tokens"] == ref,
            "rouge_l": round(rouge_l(row["tokens"], ref), 4) if ref is not None else None,
            "extras": row.get("extras", {}),
        })  # fmt: skip
    return out


def _per(total: int | None, n: int) -> float | None:
    return None if total is None or n <= 0 else total / n


def _score(runs: dict[str, dict[str, Any]], alone: list[dict[str, Any]]) -> None:
    """Each run's per-prompt figures, against the target alone's rows ``alone``."""
    reference = {r["id"]: r["tokens"] for r in alone}
    for run in runs.values():
        run["prompts"] = _per_prompt(run, reference)


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return round(math.exp(sum(map(math.log, xs)) / len(xs)), 3) if xs else None


def _mean(xs: list[Any]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(sum(xs) / len(xs), 4) if xs else None


def _summary(runs: dict[str, dict[str, Any]], ids: list[str]) -> dict[str, Any]:
    """Ratios of per-token latency against LLMCad's (geomean over the prompts in ``ids``)."""
    rows = {name: {r["id"]: r for r in run["prompts"] if r["id"] in ids} for name, run in runs.items()}
    ours = rows.get("llmcad", {})
    speedup = {}
    for name, by_id in rows.items():
        if name == "llmcad":
            continue
        ratios = [
            by_id[i]["latency_s"] / ours[i]["latency_s"]
            for i in ids
            if i in by_id and i in ours and by_id[i]["latency_s"] and ours[i]["latency_s"]
        ]
        speedup[name] = _geomean(ratios)
    return {
        "speedup_vs": speedup,
        "latency_s": {n: _mean([r["latency_s"] for r in b.values()]) for n, b in rows.items()},
        "verifications_per_token": {
            n: _mean([r["verifications_per_token"] for r in b.values()]) for n, b in rows.items()
        },
        "bytes_read_per_token": {
            n: _mean([r["bytes_read_per_token"] for r in b.values()]) for n, b in rows.items()
        },
        "ttft_s": {n: _mean([r["ttft_s"] for r in b.values()]) for n, b in rows.items()},
        "rouge_l": {n: _mean([r["rouge_l"] for r in b.values()]) for n, b in rows.items()},
        "identical_outputs": sum(r["identical"] for r in ours.values()),
        "total_prompts": len(ids),
    }


def _measure(
    config: LLMCadBenchConfig, prompts: list[dict[str, Any]], budget: int | None, systems: tuple[str, ...],
    files: list[Path], log: Callable[[str], None],
) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Each system over ``prompts`` under ``budget``; ``files``: the models' weights."""
    runs: dict[str, dict[str, Any]] = {}
    timeout = config.timeout_s
    for system in systems:
        label = "no budget" if budget is None else f"budget {budget / 2**20:.0f} MiB"
        log(f"{system} ({label}): {len(prompts)} prompts…")
        spec = {
            "system": system, "target": config.target, "draft": config.draft, "max_tokens": config.max_tokens,
            "budget": budget, "ctx": config.ctx, "sp_k": config.sp_k,
            "prompts": [{"id": p["id"], "messages": p["messages"]} for p in prompts],
        }  # fmt: skip
        started = time.monotonic()
        runs[system] = _run_child(spec, budget, files, timeout)
        if system == "std" and budget is not None and not runs[system]["error"]:
            # a system slower than twice the target alone under the same budget is
            # stopped there: it has failed what this bench measures (a thrashing one
            # would otherwise run for the whole timeout)
            timeout = min(config.timeout_s, max(STOP_FLOOR_S, 2 * (time.monotonic() - started)))
        if runs[system]["error"]:
            log(f"  {system} failed: {runs[system]['error']}")
    return runs


def run_llmcad_bench(
    config: LLMCadBenchConfig, log: Callable[[str], None] = lambda s: None
) -> dict[str, Any]:
    try:
        MemoryCgroup(64 * 2**20).remove()
    except BudgetError as exc:
        raise BudgetError(
            f"cannot enforce a memory budget here ({str(exc).splitlines()[0]}); nothing was measured",
            hint=exc.hint,
        ) from exc
    prompts = load_prompts(config.prompts) if config.prompts else build_suite(1 if config.quick else 2)
    ids = [p["id"] for p in prompts]
    files = [catalog.prepare(config.target), catalog.prepare(config.draft)]
    target_size, draft_size = (f.stat().st_size for f in files)
    report: dict[str, Any] = {"config": asdict(config), "environment": environment(), "budgets": {}}
    for fraction in config.fractions():
        budget = int(draft_size + fraction * target_size) + config.runtime_allowance
        systems = config.systems if fraction == config.budget_fraction else ("std", "llmcad")
        runs = _measure(config, prompts, budget, systems, files, log)
        _score(runs, runs["std"]["rows"])
        report["budgets"][str(fraction)] = {"budget_bytes": budget, "runs": runs}
    main = report["budgets"][str(config.budget_fraction)]
    free = _measure(config, prompts, None, tuple(s for s in UNBUDGETED if s in config.systems), files, log)
    _score(free, main["runs"]["std"]["rows"])
    report["no_budget"] = {"runs": free}
    report["summary"] = _full_summary(config, report, ids)
    out = Path(config.out)
    write_json(out / "results.json", report)
    write_markdown(out / "results.md", _markdown(report))
    from coinfer.bench.llmcad_plots import plot_all

    report["plots"] = [str(p) for p in plot_all(out, report)]
    return report


def _full_summary(config: LLMCadBenchConfig, report: dict[str, Any], ids: list[str]) -> dict[str, Any]:
    main = report["budgets"][str(config.budget_fraction)]["runs"]
    summary = _summary(main, ids)
    summary["tuned"] = _summary(main, ids[0::2])
    summary["held_out"] = _summary(main, ids[1::2])
    summary["peak_mib"] = {n: r["peak_bytes"] and round(r["peak_bytes"] / 2**20) for n, r in main.items()}
    summary["budget_mib"] = round(report["budgets"][str(config.budget_fraction)]["budget_bytes"] / 2**20)
    summary["failed"] = {n: r["error"] for n, r in main.items() if r["error"]}
    free = report["no_budget"]["runs"]
    if "auto" in free and "llmcad" in free:
        summary["no_budget_vs_auto"] = _summary({"llmcad": free["llmcad"], "auto": free["auto"]}, ids)[
            "speedup_vs"
        ]
    summary["speedup_by_fraction"] = {
        f: _summary(b["runs"], ids)["speedup_vs"].get("std") for f, b in report["budgets"].items()
    }
    return summary


def _markdown(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [
        "# coinfer bench llmcad",
        "",
        f"Target {report['config']['target']}, draft {report['config']['draft']}; budget "
        f"{s['budget_mib']} MiB (the draft's weights + {report['config']['budget_fraction']} of the "
        "target's), enforced by a memory cgroup. Speedup: another system's per-token latency over "
        "LLMCad's (geomean over prompts).",
        "",
        "| system | latency s/token | LLMCad's speedup | verifications/token | MB read/token "
        "| TTFT s | peak MiB | ROUGE-L |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in s["latency_s"]:
        mb = s["bytes_read_per_token"].get(name)
        lines.append(
            f"| {name} | {s['latency_s'][name]} | {s['speedup_vs'].get(name, '—')} | "
            f"{s['verifications_per_token'][name]} | {'—' if mb is None else round(mb / 1e6, 1)} | "
            f"{s['ttft_s'][name]} | {s['peak_mib'].get(name)} | {s['rouge_l'][name]} |"
        )
    lines += [
        "",
        f"LLMCad identical to the target alone: {s['identical_outputs']}/{s['total_prompts']}.",
        f"Tuned half: {s['tuned']['speedup_vs']}; held-out half: {s['held_out']['speedup_vs']}.",
        f"No budget, LLMCad against --draft auto: {s.get('no_budget_vs_auto')}.",
        f"Speedup over Std by budget fraction: {s['speedup_by_fraction']}.",
        "",
    ]
    return "\n".join(lines)
