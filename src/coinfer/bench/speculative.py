"""``coinfer bench speculative``: our speculative decoding against plain decoding and peers.

Every system runs the same prompts on the same target in one invocation. Speedup is
the ratio of *decode* tokens/s (first token to last; the prefill is the same work for
everyone) against plain llama.cpp decoding of the target, the baseline; end-to-end
tokens/s is reported beside it. ``identical`` says whether a system's greedy tokens
equal the baseline's. Results: ``results.json`` (``summary`` and ``peers``),
``results.md`` and ``speedup.png``.
"""

from __future__ import annotations

import cProfile
import dataclasses
import io
import math
import pstats
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.bench.peers import (
    DRAFT_PEERS,
    PEERS,
    SLOW_PEERS,
    Peer,
    Run,
    draft_for,
    llama_server_binary,
    start_peer,
    timed_run,
)
from coinfer.bench.report import environment, write_json, write_markdown
from coinfer.bench.workloads import CATEGORIES, build_suite, load_prompts
from coinfer.decoding import DecodeStats, Drafter, SpecConfig, stream
from coinfer.decoding.engine import Request, Session
from coinfer.decoding.registry import get
from coinfer.decoding.speculative import PHASES as ROUND_PHASES
from coinfer.errors import ConfigError, ModelError
from coinfer.models import SteerableModel, load_model
from coinfer.models.llamacpp import LlamaCppModel

__all__ = [
    "PEERS",
    "HeadsSystem",
    "SpecBenchConfig",
    "categories",
    "cell",
    "measure_prompt",
    "run_speculative_bench",
    "summarize",
]


SUITES = ("committed", "broad")
SPLITS = ("all", "tune", "held-out")


@dataclass(frozen=True)
class SpecBenchConfig:
    out: str
    target: str = "qwen2.5-coder-1.5b"
    max_tokens: int = 256
    quick: bool = False
    prompts: str | None = None
    peers: tuple[str, ...] = PEERS
    n_threads: int | None = None
    build_peers: bool = False  # build llama-server (about 8 minutes) when it is missing
    heads: str | None = None  # draft heads trained for the target: adds the system "heads"
    suite: str = "committed"  # committed: three categories; broad: seven (bench.broad_suite)
    split: str = "all"  # all, or per category the held-out fourth or the tune rest
    repeats: int = 1  # runs of each system per prompt, interleaved; the fastest counts
    profile: bool = False  # cProfile coinfer's runs into profile.txt

    def __post_init__(self) -> None:
        unknown = set(self.peers) - set(PEERS)
        if unknown:
            raise ConfigError(f"unknown peers {sorted(unknown)}", hint=f"known peers: {', '.join(PEERS)}")
        if self.suite not in SUITES or self.split not in SPLITS:
            raise ConfigError(
                f"unknown suite {self.suite!r} or split {self.split!r}",
                hint=f"suites: {', '.join(SUITES)}; splits: {', '.join(SPLITS)}",
            )
        if self.repeats < 1:
            raise ConfigError(
                f"repeats must be at least 1, got {self.repeats}", hint="pass --repeats N, N >= 1"
            )
        if self.max_tokens < 2:
            raise ConfigError("max_tokens must be at least 2 (decode speed needs two tokens)")


def _plain(target: SteerableModel, prompt: list[int], max_tokens: int) -> Run:
    start = time.perf_counter()
    responses = stream(target, prompt, draft=None, config=SpecConfig(max_tokens=max_tokens))
    return timed_run((t for r in responses for t in r.tokens), start)


def speculative_session(target: SteerableModel, drafter: Drafter | None = None) -> Session:
    """The speculative engine from the registry, drafting with ``drafter`` (None: n-gram
    lookup, a fresh drafter per request), ``draft_tokens="auto"``: one per system for the
    whole run, so each prompt starts from the cost curve the ones before it measured, as a
    server's requests do."""
    parts = {"target": target} if drafter is None else {"target": target, "draft": drafter}
    return get("speculative").open(parts, SpecConfig(draft_tokens="auto"))


def _ours(session: Session, prompt: list[int], max_tokens: int) -> Run:
    tokens: list[int] = []
    for r in session.stream(Request(prompt=prompt, max_tokens=max_tokens)):
        tokens += r.tokens
    s = r.stats
    return Run(tokens, s.decode_tokens_per_s, s.tokens_per_s, s.drafted, s.accepted, round_times(s))


def round_times(stats: DecodeStats) -> dict[str, float]:
    """Milliseconds per verification round by phase (``DecodeStats.phases``), and
    ``other``: the rest of the decode time per round, the engine's own Python between
    phases (generators, bookkeeping)."""
    rounds = max(1, stats.rounds)
    out = {phase: round(1000 * sec / rounds, 3) for phase, sec in stats.phases.items()}
    decode_s = (stats.last_token_at or 0.0) - (stats.first_token_at or 0.0)
    out["other"] = round(max(0.0, 1000 * decode_s / rounds - sum(out.values())), 3)
    out["rounds"] = stats.rounds
    return out


class HeadsSystem:
    """The target drafting for itself with its draft heads (``coinfer generate --draft
    heads:DIR``): a second copy of the target, loaded to keep its hidden states."""

    def __init__(self, config: SpecBenchConfig) -> None:
        from coinfer.decoding.heads_drafter import open_heads_drafter

        self.target = load_model(
            config.target, backend="llama.cpp", n_threads=config.n_threads, hidden_states=True
        )
        try:
            self.drafter = open_heads_drafter(f"heads:{config.heads}", self.target)
        except BaseException:
            self.target.close()
            raise
        self.session = speculative_session(self.target, self.drafter)

    def __call__(self, prompt: list[int], max_tokens: int) -> Run:
        return _ours(self.session, prompt, max_tokens)

    def close(self) -> None:
        self.session.close()
        self.drafter.close()
        self.target.close()


def _start_peers(
    config: SpecBenchConfig, target: LlamaCppModel, log: Callable[[str], None]
) -> dict[str, Peer]:
    if any(p.startswith("llama-server") for p in config.peers) and llama_server_binary() is None:
        if config.build_peers:
            log("building llama-server for the C++ peers (about 8 minutes)…")
            llama_server_binary(build=True)
        else:
            log("skipping the llama-server peers: not built (pass --build-peers to build them)")
    peers: dict[str, Peer] = {}
    try:
        for name in config.peers:
            if name.startswith("llama-server") and llama_server_binary() is None:
                continue
            if name in DRAFT_PEERS and draft_for(config.target) is None:
                log(f"skipping {name}: the catalogue has no draft model with {config.target}'s vocabulary")
                continue
            peers[name] = start_peer(
                name,
                target=config.target,
                model_path=str(target.path),
                eos=target.eos_ids,
                n_threads=config.n_threads,
            )
    except BaseException:  # a peer that fails to start must not leave the others running
        for peer in peers.values():
            peer.close()
        raise
    return peers


def _geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else 0.0


def categories(rows: list[dict[str, Any]]) -> list[str]:
    """The categories of ``rows``, the committed suite's first, then in order of appearance."""
    present = list(dict.fromkeys(r["category"] for r in rows))
    return [c for c in CATEGORIES if c in present] + [c for c in present if c not in CATEGORIES]


def summarize(rows: list[dict[str, Any]], system: str) -> dict[str, Any]:
    failed = sum(1 for r in rows if "error" in r.get(system, {}))
    rows = [r for r in rows if system in r and "error" not in r[system]]  # slow peers: a few prompts only
    ratios = [r[system]["speedup"] for r in rows]
    by_cat = {
        c: _geomean([r[system]["speedup"] for r in rows if r["category"] == c]) for c in categories(rows)
    }
    return {
        "geomean_speedup": round(_geomean(ratios), 3),
        "min_speedup": round(min(ratios), 3) if ratios else 0.0,
        "per_category": {c: round(v, 3) for c, v in by_cat.items() if v},
        "identical_outputs": sum(r[system]["identical"] for r in rows),
        "total_prompts": len(rows),
        "acceptance_rate": _acceptance(rows, system),
        "failed_prompts": failed,
    }


def _acceptance(rows: list[dict[str, Any]], system: str) -> float | None:
    """Accepted / drafted over all prompts, where the system reports its drafts."""
    runs = [r[system] for r in rows if r[system].get("drafted") is not None]
    drafted = sum(run["drafted"] for run in runs)
    return round(sum(run["accepted"] for run in runs) / drafted, 3) if drafted else None


def measure_prompt(
    item: dict[str, Any],
    target: LlamaCppModel,
    peers: dict[str, Peer | HeadsSystem],
    config: SpecBenchConfig,
    log: Callable[[str], None],
    first_of_category: bool = True,
    profiler: cProfile.Profile | None = None,
    ours: Session | None = None,
) -> dict[str, Any]:
    """One prompt through the baseline, coinfer and every peer (slow ones: first prompts
    only), each ``config.repeats`` times in turn; each system's fastest run counts (noise
    on a shared machine only ever slows a run). A peer that remembers earlier requests
    (``Peer.remembers``) runs once: again, it would draft from its own answer. ``ours``:
    coinfer's session for the run (None: one for this prompt alone)."""
    prompt = target.chat_prompt(item["messages"])
    session = ours or speculative_session(target)
    systems: dict[str, Callable[[list[int], int], Run]] = {
        "baseline": lambda p, m: _plain(target, p, m),
        "coinfer": lambda p, m: _profiled(profiler, lambda: _ours(session, p, m)),
        **{n: p for n, p in peers.items() if first_of_category or n not in SLOW_PEERS},
    }
    runs: dict[str, Run] = {}
    row: dict[str, Any] = {"id": item["id"], "category": item["category"]}
    for repeat in range(config.repeats):
        for name, system in systems.items():
            if name in row or (repeat and getattr(system, "remembers", False)):  # failed, or would replay
                continue
            try:
                run = system(prompt, config.max_tokens)
            except Exception as exc:  # a peer's own failure is recorded, not allowed to end the run
                if name in ("baseline", "coinfer"):
                    raise
                row[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                log(f"  {name} failed on {item['id']}: {row[name]['error']}")
                continue
            runs[name] = _faster(runs.get(name), run)
    base = runs.pop("baseline")
    row["tokens"] = len(base.tokens)
    row["baseline"] = {"decode_tps": round(base.decode_tps, 2), "e2e_tps": round(base.e2e_tps, 2)}
    for name, run in runs.items():
        row[name] = {
            "decode_tps": round(run.decode_tps, 2),
            "e2e_tps": round(run.e2e_tps, 2),
            "speedup": round(run.decode_tps / base.decode_tps, 3) if base.decode_tps else 0.0,
            "identical": run.tokens == base.tokens,
            "drafted": run.drafted,
            "accepted": run.accepted,
            "timings": run.timings,
        }
    shown = [n for n in systems if n != "baseline"]
    log(f"  {item['id']}: " + ", ".join(f"{n} {cell(row.get(n))}" for n in shown))
    return row


def _faster(old: Run | None, new: Run) -> Run:
    """The faster of two runs of one system, keeping the first run's text (a later run
    that decodes a different text says the system is not deterministic: it counts as
    not identical)."""
    if old is None:
        return new
    best = new if new.decode_tps > old.decode_tps else old
    tokens = old.tokens if new.tokens == old.tokens else []
    return dataclasses.replace(best, tokens=tokens)


def _profiled(profiler: cProfile.Profile | None, call: Callable[[], Run]) -> Run:
    if profiler is None:
        return call()
    profiler.enable()
    try:
        return call()
    finally:
        profiler.disable()


def _prompts(config: SpecBenchConfig) -> list[dict[str, Any]]:
    if config.prompts:
        return load_prompts(config.prompts)
    per_category = 2 if config.quick else 8
    return broad_suite(per_category) if config.suite == "broad" else build_suite(per_category)


def run_speculative_bench(config: SpecBenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    prompts = split_suite(_prompts(config), config.split)
    target = load_model(config.target, backend="llama.cpp", n_threads=config.n_threads)
    if not isinstance(target, LlamaCppModel):  # pragma: no cover - load_model's llama.cpp backend
        raise ModelError(f"{config.target} did not load on llama.cpp")
    peers: dict[str, Any] = dict(_start_peers(config, target, log))
    if config.heads:
        peers["heads"] = HeadsSystem(config)
    profiler = cProfile.Profile() if config.profile else None
    ours = speculative_session(target)
    try:
        seen: set[str] = set()
        rows: list[dict[str, Any]] = []
        report: dict[str, Any] = {}
        where = environment()
        for item in prompts:
            first = item["category"] not in seen
            rows.append(measure_prompt(item, target, peers, config, log, first, profiler, ours))
            seen.add(item["category"])
            report = _write_report(config, where, rows, list(peers))  # a long run keeps what it measured
        if profiler is not None:
            write_profile(Path(config.out) / "profile.txt", profiler, rows)
    finally:  # never leave llama-server processes behind
        ours.close()
        target.close()
        for peer in peers.values():
            peer.close()
    return report


def write_profile(path: Path, profiler: cProfile.Profile, rows: list[dict[str, Any]]) -> None:
    """coinfer's runs under cProfile: the Python overhead per round (the round's time
    outside the target's forward and the moving of its logits), then the functions that
    took most time of their own."""
    times = [r["coinfer"]["timings"] for r in rows if r.get("coinfer", {}).get("timings")]
    rounds = sum(t["rounds"] for t in times) or 1
    python = sum(
        t["rounds"] * sum(t.get(ph, 0.0) for ph in PHASES if ph not in ("forward", "logits")) for t in times
    )
    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).sort_stats("tottime").print_stats(30)
    head = (
        f"Python overhead per round, under cProfile: {python / rounds:.3f} ms over {rounds} rounds "
        "(the round's time outside the target's forward and the moving of its logits)\n\n"
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + buf.getvalue())


def _write_report(
    config: SpecBenchConfig, where: dict[str, Any], rows: list[dict[str, Any]], peers: list[str]
) -> dict[str, Any]:
    report = {
        "config": asdict(config),
        "environment": where,
        "summary": summarize(rows, "coinfer"),
        "peers": {name: summarize(rows, name) for name in peers},
        "results": rows,
    }
    out = Path(config.out)
    write_json(out / "results.json", report)
    write_markdown(out / "results.md", _markdown(report, peers))
    _plot(out / "speedup.png", report, peers)
    return report


def _markdown(report: dict[str, Any], peers: list[str]) -> str:
    systems = ["coinfer", *peers]
    cats_present = categories(report["results"])
    lines = [
        "# coinfer bench speculative",
        "",
        f"Target `{report['config']['target']}`, greedy, up to {report['config']['max_tokens']} new tokens. "
        "Speedup = decode tokens/s over plain llama.cpp decoding of the target.",
        "",
        "| system | geomean | min | " + " | ".join(cats_present) + " | identical | acceptance |",
        "|---|---|---|" + "---|" * len(cats_present) + "---|---|",
    ]
    for name in systems:
        s = report["summary"] if name == "coinfer" else report["peers"][name]
        cats = " | ".join(
            f"{s['per_category'][c]:.2f}x" if c in s["per_category"] else "–" for c in cats_present
        )
        lines.append(
            f"| {name} | {s['geomean_speedup']:.2f}x | {s['min_speedup']:.2f}x | {cats} | "
            f"{s['identical_outputs']}/{s['total_prompts']} | "
            + ("–" if s["acceptance_rate"] is None else f"{s['acceptance_rate']:.0%}")
            + " |"
        )
    lines += [
        "",
        "| prompt | tokens | baseline tok/s | " + " | ".join(systems) + " |",
        "|---|---|---|" + "---|" * len(systems),
    ]
    for r in report["results"]:
        cells = " | ".join(cell(r.get(n)) for n in systems)
        lines.append(f"| {r['id']} | {r['tokens']} | {r['baseline']['decode_tps']:.1f} | {cells} |")
    lines += time_table(report["results"], systems)
    lines += [
        "",
        "≠: output differs from the baseline's greedy output. –: not run (slow peers run on the "
        "first prompt of each category). transformers-assisted runs de-quantized weights, so its "
        "text may differ from llama.cpp's. llama-server's decode rate is its own "
        "`timings.predicted_per_second`.",
    ]
    return "\n".join(lines) + "\n"


PHASES = (*ROUND_PHASES, "detok", "other")  # the engine's, then what ``stream`` and the bench add


def time_table(rows: list[dict[str, Any]], systems: list[str]) -> list[str]:
    """Where the time went, over all prompts: coinfer's milliseconds per round by phase;
    a llama-server peer's own milliseconds per token."""
    lines = [
        "",
        "| system | rounds | tokens/round | ms/round | " + " | ".join(PHASES) + " | ms/token |",
        "|---|---|---|---|" + "---|" * len(PHASES) + "---|",
    ]
    for name in systems:
        runs = [(r["tokens"], r[name]["timings"]) for r in rows if (r.get(name) or {}).get("timings")]
        if runs:
            lines.append(f"| {name} | " + " | ".join(_time_cells(runs)) + " |")
    return lines if len(lines) > 3 else []


def _time_cells(runs: list[tuple[int, dict[str, float]]]) -> list[str]:
    if "rounds" not in runs[0][1]:  # llama-server: its own ms per predicted token
        ms = sum(t.get("predicted_ms", 0.0) for _, t in runs)
        n = sum(t.get("predicted_n", 0) for _, t in runs)
        return ["–"] * (3 + len(PHASES)) + [f"{ms / max(1, n):.1f}"]
    rounds = sum(int(t["rounds"]) for _, t in runs) or 1
    per = {ph: sum(t.get(ph, 0.0) * t["rounds"] for _, t in runs) / rounds for ph in PHASES}
    total, tokens = sum(per.values()), sum(n for n, _ in runs)
    return [
        str(rounds),
        f"{tokens / rounds:.2f}",
        f"{total:.1f}",
        *(f"{per[ph]:.2f}" for ph in PHASES),
        f"{total * rounds / max(1, tokens):.1f}",
    ]


def cell(run: dict[str, Any] | None) -> str:
    if run is None:
        return "–"
    if "error" in run:
        return "failed"
    return f"{run['speedup']:.2f}x{'' if run['identical'] else ' ≠'}"


def _plot(path: Path, report: dict[str, Any], peers: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = ["coinfer", *peers]
    cats = categories(report["results"])
    fig, ax = plt.subplots(figsize=(max(7, len(cats)), 3.5))
    width = 0.8 / len(systems)
    for i, name in enumerate(systems):
        s = report["summary"] if name == "coinfer" else report["peers"][name]
        values = [s["per_category"].get(c, 0.0) for c in cats]
        ax.bar([j + i * width for j in range(len(cats))], values, width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(cats))], cats)
    ax.set_ylabel("decode speedup vs plain")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
