"""``coinfer bench dragon``: device and cloud answering together, under injected latency.

The cloud is a real ``coinfer rag cloud`` process and every answer a real ``coinfer rag
ask --json`` process, the two pinned to a core each where the machine has two (as the
paper's testbed runs one process per side). Between them a ``LatencyRelay`` adds the
round-trip time (0, 50, 100, 200, 300 ms; jitter 1/5 of it): this kernel has no
``netem``. With ``bandwidth_mbit`` the cloud runs in a network namespace behind a veth pair
shaped by ``tbf`` (``netns.ShapedLink``, root only); otherwise the link is loopback (results
say which).

The question-answering workload: questions whose answer needs a fact only the device's
corpus holds and one only the cloud's holds (``data/dragon/qa.jsonl``). Systems:
device-only and cloud-only RAG (each side alone, no network), DRDG/TW (token-wise
synchronous aggregation: ``--lookahead 0``), DRAGON with the aggregator fixed on the
device, fixed on the cloud, and moved by the live scheduler; and, not in the paper, both
sides aggregating (``dragon-both``, and ``drdg-tw-both``: the same token-wise). With
``device_model`` the device runs a smaller model than the cloud. Per system and delay:
per-token latency (decode time per token after the first), TTFT, bytes the device sent
per token, the cloud's and the device's acceptance, and whether the answer holds each
side's fact.

The cloud keeps its documents' KV caches across questions (``DocumentCache``), as the
paper's cloud keeps its documents' KVs: before the timed answers of a question, one
untimed answer lets it read them. Every ``coinfer rag ask`` is a new process, so the
device reads its documents afresh in every system.

The language-modelling workload (``dragon_lm``) scores perplexity in one process: no-RAG,
device-only, cloud-only, CRCG, DRCG and DRAGON on the same tokens.

Not here: the TTFT of DRCG/Text and DRCG/KV and the latency of DRDG/SW (see the bench's
README).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from coinfer.bench.dragon_lm import LmWorkload, perplexities
from coinfer.bench.netns import PEER, ShapedLink
from coinfer.bench.relay import LatencyRelay
from coinfer.bench.report import environment, pyplot, write_json, write_markdown
from coinfer.errors import ConfigError
from coinfer.serve.process import stop_process

__all__ = ["DELAYS", "SYSTEMS", "DragonBenchConfig", "RagCloud", "rag_ask", "run_dragon_bench", "side_cores"]

DELAYS = (0.0, 0.05, 0.1, 0.2, 0.3)
_ALONE = ("device-only", "cloud-only")
_LINKED = {
    "drdg-tw": ["--lookahead", "0", "--aggregator", "device"],
    "dragon-device": ["--aggregator", "device"],
    "dragon-cloud": ["--aggregator", "cloud"],
    "dragon-live": ["--aggregator", "auto"],
    "drdg-tw-both": ["--lookahead", "0", "--aggregator", "both"],
    "dragon-both": ["--aggregator", "both"],
}
SYSTEMS = (*_ALONE, *_LINKED)
_TOKEN = secrets.token_hex(16)  # the link's, this process's sides only


@dataclass(frozen=True, kw_only=True)
class DragonBenchConfig:
    out: str
    model: str = "qwen2.5-coder-1.5b"
    device_model: str | None = None  # a smaller device (the same vocabulary); None: ``model``
    max_tokens: int = 48
    delays: Sequence[float] = DELAYS
    questions: str | None = None  # a JSONL file like data/dragon/qa.jsonl
    limit: int | None = None  # the first N questions
    quick: bool = False
    workloads: Sequence[str] = ("qa", "lm")
    lm: LmWorkload = LmWorkload(window=256, windows=12)
    systems: Sequence[str] = SYSTEMS
    bandwidth_mbit: float | None = None  # tbf on a veth pair into a namespace (root); None: loopback

    def resolved(self) -> DragonBenchConfig:
        """Quick: SmolLM2, 16 tokens, three delays, two questions."""
        if not self.quick:
            return self
        return DragonBenchConfig(
            out=self.out,
            model="smollm2-135m",
            max_tokens=16,
            delays=(0.0, 0.1, 0.3),
            questions=self.questions,
            limit=self.limit or 2,
            workloads=self.workloads,
            lm=LmWorkload(window=96, windows=2, corpus_modules=self.lm.eval_modules[:2]),
            systems=self.systems,
            bandwidth_mbit=self.bandwidth_mbit,
            device_model=None,
        )


def load_questions(path: str | None, limit: int | None) -> list[dict[str, Any]]:
    text = (
        Path(path).read_text()
        if path
        else resources.files("coinfer.bench").joinpath("data/dragon/qa.jsonl").read_text()
    )
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    for row in rows:
        if not {"id", "question", "device", "cloud", "facts"} <= set(row):
            raise ConfigError(f"a question needs id, question, device, cloud and facts: {row}")
    return rows[:limit] if limit else rows


def _pin(core: int | None) -> Callable[[], None] | None:
    if core is None:
        return None
    return lambda: os.sched_setaffinity(0, {core})


def side_cores() -> tuple[int | None, int | None]:
    """(device core, cloud core): one each where there are two, else unpinned. Each side
    runs on one thread on its own core, as on two machines: on a shared pair of cores two
    llama.cpp processes of two threads each spin at each other's barriers."""
    cores = sorted(os.sched_getaffinity(0))
    return (cores[0], cores[1]) if len(cores) >= 2 else (None, None)


def _write_corpus(folder: Path, files: dict[str, str]) -> str:
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return str(folder)


def _rag(command: str, corpus: str, model: str, *extra: str) -> list[str]:
    """The command line of ``coinfer rag COMMAND`` on one thread."""
    return [
        sys.executable,
        "-m",
        "coinfer",
        "rag",
        command,
        "--corpus",
        corpus,
        "-m",
        model,
        "--threads",
        "1",
        *extra,
    ]


def _child(core: int | None) -> dict[str, Any]:
    """How a side's process starts: the link's token, pinned to ``core``."""
    return {"text": True, "env": {**os.environ, "COINFER_LINK_TOKEN": _TOKEN}, "preexec_fn": _pin(core)}


def _link_words(bandwidth_mbit: float | None) -> str:
    if bandwidth_mbit is None:
        return "loopback through a user-space latency relay"
    return f"a user-space latency relay, then a veth pair into a namespace, tbf at {bandwidth_mbit} Mbit/s"


class RagCloud:
    """A ``coinfer rag cloud`` process on one thread and its own core (``side_cores``),
    serving one corpus; in the shaped link's namespace when there is one."""

    def __init__(self, corpus: str, model: str, core: int | None, shaped: ShapedLink | None = None) -> None:
        self.host = PEER if shaped else "127.0.0.1"
        self.proc = subprocess.Popen(
            [*(shaped.prefix if shaped else []), *_rag("cloud", corpus, model, "--listen", f"{self.host}:0")],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            **_child(core),
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.close()
            raise ConfigError(f"coinfer rag cloud did not start: {line.strip() or 'no output'}")
        self.port = int(line.split(" on ", 1)[1].split()[0].rpartition(":")[2])

    def close(self) -> None:
        stop_process(self.proc, timeout=60)


def rag_ask(
    model: str, corpus: str, question: str, max_tokens: int, core: int | None, link: list[str],
    *, timeout_s: float = 1800,
) -> dict[str, Any]:  # fmt: skip
    """``coinfer rag ask --json`` on one thread (on ``core``), ``link`` its cloud flags: its
    report, or ``{"error": its last two lines}``; ``subprocess.TimeoutExpired`` past ``timeout_s``."""
    args = _rag("ask", corpus, model, "--max-tokens", str(max_tokens), "--json", *link, question)
    proc = subprocess.run(args, capture_output=True, timeout=timeout_s, **_child(core))
    if proc.returncode != 0:
        return {"error": " ".join((proc.stderr.strip().splitlines() or ["failed"])[-2:])}  # error, hint
    return dict(json.loads(proc.stdout))


def _row(system: str, delay: float | None, q: dict[str, Any], r: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"system": system, "delay_s": delay, "id": q["id"]}
    if "error" in r:
        return {**row, "error": r["error"]}
    tokens = max(1, int(r["tokens"]))
    text = r["text"].lower()
    row.update(
        latency_s=round(1 / r["decode_tokens_per_s"], 5) if r["decode_tokens_per_s"] else None,
        ttft_s=r["ttft_s"],
        tokens=r["tokens"],
        bytes_sent_per_token=round(r.get("bytes_sent", 0) / tokens, 1),
        accepted=r.get("accepted"),
        rejected=r.get("rejected"),
        fallback=r.get("fallback"),
        facts={side: fact.lower() in text for side, fact in q["facts"].items()},
        text=r["text"],
    )
    return row


def run_dragon_bench(config: DragonBenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    config = config.resolved()
    unknown = set(config.workloads) - {"qa", "lm"}
    if unknown or not config.workloads:
        raise ConfigError(f"unknown workloads {sorted(unknown)}", hint="choose from qa and lm")
    if set(config.systems) - set(SYSTEMS) or not config.systems:
        raise ConfigError(
            f"unknown systems in {list(config.systems)}", hint=f"choose from {', '.join(SYSTEMS)}"
        )
    questions = load_questions(config.questions, config.limit) if "qa" in config.workloads else []
    rows = _qa_runs(config, questions, log)
    lm = _lm_runs(config, log) if "lm" in config.workloads else None
    summary = summarize(rows, config.delays)
    summary.update(_lm_summary(lm))
    report = {
        "config": {
            "model": config.model,
            "device_model": config.device_model or config.model,
            "max_tokens": config.max_tokens,
            "delays_s": list(config.delays),
            "questions": [q["id"] for q in questions],
            "link": _link_words(config.bandwidth_mbit),
            "pinned": side_cores()[0] is not None,
            "workloads": list(config.workloads),
            "systems": [x for x in SYSTEMS if x in config.systems],
            "lm": {
                "window": config.lm.window,
                "windows": config.lm.windows,
                "documents_per_side": config.lm.top_k,
            },
        },
        "environment": environment(),
        "summary": summary,
        "runs": rows,
        "lm_windows": lm["windows"] if lm else [],
    }
    out = Path(config.out)
    write_json(out / "results.json", report)
    write_markdown(out / "results.md", markdown(report))
    plot(out, report)
    return report


def _qa_runs(
    config: DragonBenchConfig, questions: list[dict[str, Any]], log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Question answering: every system on every question, the linked ones at every delay."""
    device_core, cloud_core = side_cores()
    device_model = config.device_model or config.model
    rows: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="coinfer-bench-dragon-"))
        shaped = stack.enter_context(ShapedLink(config.bandwidth_mbit)) if config.bandwidth_mbit else None
        for q in questions:
            device = _write_corpus(Path(tmp) / q["id"] / "device", q["device"])
            cloud_dir = _write_corpus(Path(tmp) / q["id"] / "cloud", q["cloud"])
            for system, corpus, core, model in (
                ("device-only", device, device_core, device_model),
                ("cloud-only", cloud_dir, cloud_core, config.model),
            ):
                if system not in config.systems:
                    continue
                log(f"{q['id']}: {system}")
                r = rag_ask(model, corpus, q["question"], config.max_tokens, core, [])
                rows.append(_row(system, None, q, r))
            cloud = RagCloud(cloud_dir, config.model, cloud_core, shaped)
            try:
                log(f"{q['id']}: the cloud reads its documents once (not timed)")
                warm = ["--cloud", f"{cloud.host}:{cloud.port}", "--aggregator", "device"]
                rag_ask(device_model, device, q["question"], config.max_tokens, device_core, warm)
                for delay in config.delays:
                    with LatencyRelay((cloud.host, cloud.port), rtt_s=delay, jitter_s=delay / 5) as relay:
                        for system, flags in _LINKED.items():
                            if system not in config.systems:
                                continue
                            log(f"{q['id']}: {system} at {delay * 1000:.0f} ms")
                            link = ["--cloud", f"127.0.0.1:{relay.port}", "--cloud-timeout", "60", *flags]
                            r = rag_ask(
                                device_model, device, q["question"], config.max_tokens, device_core, link
                            )
                            rows.append(_row(system, delay, q, r))
            finally:
                cloud.close()
    return rows


def _lm_runs(config: DragonBenchConfig, log: Callable[[str], None]) -> dict[str, Any]:
    """Language modelling in this process, on every core this process may use."""
    from coinfer.models import load_model

    model = load_model(config.model, n_threads=len(os.sched_getaffinity(0)))
    try:
        return perplexities(model, config.lm, log)
    finally:
        model.close()


def _lm_summary(lm: dict[str, Any] | None) -> dict[str, Any]:
    """Perplexity per system, and DRAGON's over the best centralized baseline's (CRCG or
    DRCG: at most 1 is the target) and over each side alone's (below 1)."""
    if lm is None:
        return {"perplexity": None}
    p = lm["perplexity"]
    best_central = min(p["crcg"], p["drcg"])
    return {
        "perplexity": p,
        "perplexity_by_half": lm["perplexity_by_half"],
        "dragon_perplexity_over_best_centralized": {
            s: round(p[s] / best_central, 4) for s in ("dragon", "dragon-dynamic") if p.get(s)
        },
        "dragon_perplexity_over_alone": {
            s: {a: round(p[s] / p[a], 4) for a in ("device-only", "cloud-only")}
            for s in ("dragon", "dragon-dynamic")
            if p.get(s)
        },
    }


def plot(out: Path, report: dict[str, Any]) -> list[Path]:
    """``latency.png`` and ``ttft.png``: each linked system against the added delay, the
    sides alone as lines (written only with matplotlib, the ``bench`` extra)."""
    plt = pyplot()
    s, delays = report["summary"], report["config"]["delays_s"]
    if plt is None or not report["runs"]:
        return []
    written = []
    for key, name, label in (
        ("latency_s", "latency.png", "seconds per token"),
        ("ttft_s", "ttft.png", "TTFT (s)"),
    ):
        fig, ax = plt.subplots(figsize=(6, 3.8))
        for system in _LINKED:
            points = [(d * 1000, s[key][system][str(d)]) for d in delays if s[key][system][str(d)]]
            ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=system)
        for system, values in s["alone"].items():
            if values[key]:
                ax.axhline(
                    values[key],
                    linestyle="--",
                    linewidth=1,
                    color="grey" if system == "cloud-only" else "black",
                    label=system,
                )
        ax.set_xlabel("added round-trip time (ms)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        written.append(out / name)
    return written


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 5) if values else None


def summarize(rows: list[dict[str, Any]], delays: Sequence[float]) -> dict[str, Any]:
    """Per system and delay: mean latency per token and TTFT; DRAGON's latency reduction
    against DRDG/TW per delay (1 - DRAGON / TW, the better fixed aggregation side); the
    live scheduler's latency over the better fixed side's (at most 1 is the target); TTFT
    against device-only; how often each system's answer held both sides' facts. Symmetric
    aggregation (``both``, not in the paper) gets its own reduction and ratio."""
    ok = [r for r in rows if "error" not in r and r.get("latency_s")]

    def mean_of(key: str, system: str, delay: float | None) -> float | None:
        return _mean([r[key] for r in ok if r["system"] == system and r["delay_s"] == delay])

    latency = {s: {str(d): mean_of("latency_s", s, d) for d in delays} for s in _LINKED}
    ttft = {s: {str(d): mean_of("ttft_s", s, d) for d in delays} for s in _LINKED}
    alone = {
        s: {"latency_s": mean_of("latency_s", s, None), "ttft_s": mean_of("ttft_s", s, None)} for s in _ALONE
    }
    best = {
        str(d): min(
            (v for v in (latency["dragon-device"][str(d)], latency["dragon-cloud"][str(d)]) if v),
            default=None,
        )
        for d in delays
    }
    tw = latency["drdg-tw"]
    alone_ttft: dict[str, float | None] = dict.fromkeys(
        best, alone["device-only"]["ttft_s"]
    )  # the same at every delay

    def ratio(a: float, b: float) -> float:
        return round(a / b, 3)

    def reduction(a: float, b: float) -> float:
        return round(1 - a / b, 4)

    both = {s: _mean([float(all(r["facts"].values())) for r in ok if r["system"] == s]) for s in SYSTEMS}
    return {
        "latency_s": latency,
        "ttft_s": ttft,
        "alone": alone,
        "latency_reduction_vs_tw": _by_delay(best, tw, reduction),
        "live_over_best_fixed": _by_delay(latency["dragon-live"], best, ratio),
        "ttft_ratio_vs_device_only": _by_delay(ttft["dragon-device"], alone_ttft, ratio),
        "both_reduction_vs_tw": _by_delay(latency["dragon-both"], tw, reduction),
        "both_over_best_fixed": _by_delay(latency["dragon-both"], best, ratio),
        "both_ttft_ratio_vs_device_only": _by_delay(ttft["dragon-both"], alone_ttft, ratio),
        "answers_with_both_facts": both,
        "failed": [{k: r[k] for k in ("system", "delay_s", "id", "error")} for r in rows if "error" in r],
    }


def _by_delay(
    a: dict[str, float | None], b: dict[str, float | None], f: Callable[[float, float], float]
) -> dict[str, float | None]:
    """``f(a[d], b[d])`` per delay, None where either is missing."""
    return {d: f(x, y) if x and (y := b.get(d)) else None for d, x in a.items()}


def _models_words(c: dict[str, Any]) -> str:
    device = c.get("device_model", c["model"])
    return (
        f"Model {c['model']} on both sides"
        if device == c["model"]
        else f"{c['model']} in the cloud, {device} on the device"
    )


def markdown(report: dict[str, Any]) -> str:
    s, c = report["summary"], report["config"]
    lines = ["# coinfer bench dragon", ""]
    if c.get("questions"):
        lines += _qa_markdown(s, c)
    if s.get("perplexity"):
        lines += _lm_markdown(s, c)
    return "\n".join(lines)


def _qa_markdown(s: dict[str, Any], c: dict[str, Any]) -> list[str]:
    lines = [
        f"{_models_words(c)}, {c['max_tokens']} tokens per answer, "
        f"{len(c['questions'])} questions; {c['link']}; one core per side: {c['pinned']}.",
        "",
        "| system | " + " | ".join(f"{float(d) * 1000:.0f} ms" for d in c["delays_s"]) + " |",
        "|---|" + "---|" * len(c["delays_s"]),
    ]
    for key, unit in (("latency_s", "s/token"), ("ttft_s", "TTFT s")):
        for system, by_delay in s[key].items():
            cells = [by_delay[str(d)] for d in c["delays_s"]]
            if any(cells):
                lines.append(f"| {system} {unit} | " + " | ".join(str(v) for v in cells) + " |")
        for system, v in s["alone"].items():  # no link: one figure for every delay
            cells = [v[key]] * len(c["delays_s"])
            if v[key] is not None:
                lines.append(f"| {system} {unit} (no link) | " + " | ".join(str(x) for x in cells) + " |")
    lines += [
        "",
        f"DRAGON's latency reduction against DRDG/TW by delay: {s['latency_reduction_vs_tw']}.",
        f"The live scheduler's latency over the better fixed side's: {s['live_over_best_fixed']}.",
        f"DRAGON (device aggregates) TTFT over device-only's: {s['ttft_ratio_vs_device_only']}.",
        *(
            [
                f"Both sides aggregating: latency reduction against DRDG/TW {s['both_reduction_vs_tw']}; "
                f"latency over the better fixed side's {s['both_over_best_fixed']}; "
                f"TTFT over device-only's {s['both_ttft_ratio_vs_device_only']}.",
            ]
            if any((s.get("both_reduction_vs_tw") or {}).values())
            else []
        ),
        f"Answers holding both sides' facts: {s['answers_with_both_facts']}.",
        f"Failed runs: {len(s['failed'])}.",
        "",
    ]
    return lines


def _lm_markdown(s: dict[str, Any], c: dict[str, Any]) -> list[str]:
    lm = c["lm"]
    lines = [
        f"Language modelling: {lm['windows']} windows of {lm['window']} tokens over CPython's "
        f"documentation, {lm['documents_per_side']} documents per side.",
        "",
        "| system | perplexity | half a | half b |",
        "|---|---|---|---|",
    ]
    halves = s["perplexity_by_half"]
    for system in s["perplexity"]:  # in dragon_lm.LM_SYSTEMS' order
        lines.append(
            f"| {system} | {s['perplexity'][system]} | {halves['a'][system]} | {halves['b'][system]} |"
        )
    lines += [
        "",
        f"DRAGON's perplexity over the best centralized baseline's: "
        f"{s['dragon_perplexity_over_best_centralized']}; over each side alone's: "
        f"{s['dragon_perplexity_over_alone']}.",
        "",
    ]
    return lines
