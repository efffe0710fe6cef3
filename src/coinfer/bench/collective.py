"""``coinfer bench collective``: several drafts voting, against plain batched decoding
and speculative decoding with each draft alone (paper 001, Figures 10-12).

Every configuration runs the same prompts through the collective engine on the same
target, at batch sizes 1, 4 and 8 (requests decoded together):

* ``plain``: no drafts (``s = 0``), batched decoding;
* ``single:<draft>``: one draft, ``s = 4``, as a user gets it with ``--drafts <draft>``
  (the gate drafts only while the draft pays for itself: ``engines.collective.gate``);
* the ablation (Figure 10): ``default`` (the first draft alone: the row of its
  ``single``), ``+majority`` (every draft, voted, ``s = 4``, gated), ``+selector`` (and
  ``s`` chosen online), ``+pipeline`` (and drafting overlapped with verifying, where that
  pays); and ``majority-every-draft``, the paper's vote with every draft drafting every
  round (``--every-draft``), to show what the gate does;
* the sweep (Figure 12): every draft voted with each fixed ``s`` from 1 to 12, against the
  selector, at one batch size (``sweep_batch``), unless ``sweep`` is off.

Throughput is output tokens over wall time, prefill included; ``decode_tokens_per_s``
leaves the prefills out (the tokens after each request's first over the time not spent
reading prompts), and ``prefill_s`` is that time. Per category (the suite's), each
request's decode rate (its tokens after the first over the time from its first token to
its last, less the time it stalled while other requests' prompts were read) is summed
over the category's requests, against plain decoding's at the same
batch size. With ``category_workloads`` each category's prompts run alone, under every
configuration in turn before the next category, and a category's figure is its own run's
decode rate (``bench.collective_workloads`` says why). Normalized latency is each
request's time over its output tokens, averaged. With
``repeats`` every configuration runs that many times at each batch size, taken in turn
(plain, each single, …, then again), and the fastest counts: a row's run with the best
decode rate, and per category each request's fastest run; a configuration is identical
to plain decoding on a prompt only where every one of its runs was. With category
workloads, a category's repeats run one after another before the next category, and its
figure is the median over the repeats of each repeat's ratio to plain decoding's
(``summary.repeats`` holds every repeat's ratio, the median of the overall decode ratios,
and how far plain decoding's own repeats of a category lie apart).
Acceptance per draft and of the voted drafts comes from the ``+majority`` runs (Figure
11). Greedy outputs are compared with plain decoding's. Results: ``results.json``
(``summary.throughput_ratio_vs_plain`` and ``summary.per_category`` per batch size,
``summary.ablation``, ``summary.targets``), ``results.md`` and PNG plots.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from coinfer.bench.broad_suite import broad_suite, split_suite
from coinfer.bench.collective_markdown import markdown
from coinfer.bench.collective_priced import (
    PRICE_ROUNDS,
    compared,
    forward_prices,
    forwards_by_category,
    median,
    near_prices,
    paired_category_ratios,
    priced_figures,
    repeat_figures,
    shapes_to_price,
)
from coinfer.bench.collective_workloads import (
    WorkloadPart,
    joined_run,
    tokens_after_first,
    workload_figures,
    workload_runs,
)
from coinfer.bench.report import environment, write_json, write_markdown
from coinfer.bench.workloads import build_suite, load_prompts
from coinfer.decoding import Drafter, Response, open_drafter
from coinfer.decoding.learned import Learned
from coinfer.engines import collective
from coinfer.engines.collective import CollectiveConfig
from coinfer.errors import ConfigError
from coinfer.models import SteerableModel, load_model

__all__ = [
    "CollectiveBenchConfig",
    "bench_workload",
    "configurations",
    "finish",
    "load_bench_model",
    "measured_row",
    "price_batch",
    "run_collective_bench",
    "summarize",
]

FIXED_S = 4  # the paper's Default speculation length
SUITES = ("committed", "broad")
SPLITS = ("all", "tune", "held-out")
ENGINE_CONFIGS = ("+majority", "+selector", "+pipeline")  # what `coinfer generate --engine collective` runs
COPY_CATEGORIES = ("edit", "quote", "grounded")  # the categories with text to copy (both suites)


@dataclass(frozen=True)
class CollectiveBenchConfig:
    out: str
    target: str = "qwen2.5-coder-1.5b"
    drafts: tuple[str, ...] = ("qwen2.5-coder-0.5b", "ngram", "smollm2-135m")
    batch_sizes: tuple[int, ...] = (1, 4, 8)
    max_tokens: int = 128
    quick: bool = False
    prompts: str | None = None
    sweep_batch: int = 4
    n_ctx: int = 2048  # per running request
    suite: str = "committed"  # committed: three categories; broad: seven (bench.broad_suite)
    split: str = "all"  # all, or per category the held-out fourth or the tune rest
    sweep: bool = True
    repeats: int = 1  # runs of every configuration per batch size, in turn; the fastest counts
    only: tuple[str, ...] = ()  # configurations to run beside plain (names as in the rows); () all
    per_category: int | None = None  # prompts per category before the split (None: 2 quick, else 8 or 4)
    category_workloads: bool = False  # each category's prompts run alone (``bench.collective_workloads``)
    price_rounds: int = PRICE_ROUNDS  # rounds of each batch size's price table (``forward_prices``)

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ConfigError(f"repeats must be at least 1, got {self.repeats}", hint="pass --repeats N >= 1")
        if self.price_rounds < 1:
            hint = "pass --price-rounds N >= 1"
            raise ConfigError(f"price rounds must be at least 1, got {self.price_rounds}", hint=hint)
        if not self.drafts:
            raise ConfigError("bench collective needs at least one draft")
        if self.suite not in SUITES or self.split not in SPLITS:
            raise ConfigError(
                f"unknown suite {self.suite!r} or split {self.split!r}",
                hint=f"suites: {', '.join(SUITES)}; splits: {', '.join(SPLITS)}",
            )
        known = {"single:" + d for d in self.drafts} | {"majority-every-draft", *ENGINE_CONFIGS}
        unknown = sorted(set(self.only) - known)
        if unknown:
            hint = f"choose from {', '.join(sorted(known))}"
            raise ConfigError(f"unknown configuration {unknown[0]!r}", hint=hint)
        if min(self.batch_sizes, default=0) < 1 or self.max_tokens < 2:
            raise ConfigError("batch sizes must be >= 1 and max_tokens >= 2")
        if self.per_category is not None and self.per_category < 1:
            hint = "pass --per-category N >= 1"
            raise ConfigError(f"per_category must be at least 1, got {self.per_category}", hint=hint)


def bench_workload(config: CollectiveBenchConfig) -> list[dict[str, Any]]:
    """The prompts the bench runs: the file's, or the suite's, per the split."""
    if config.prompts:
        return split_suite(load_prompts(config.prompts), config.split)
    default = 2 if config.quick else 8 if config.suite == "broad" else 4
    per_category = config.per_category or default
    if config.suite == "broad":
        return split_suite(broad_suite(per_category), config.split)
    return split_suite(build_suite(per_category=per_category), config.split)


def _drafters(
    specs: Sequence[str], target: SteerableModel, models: dict[str, SteerableModel], messages: list[Any]
) -> list[Drafter]:
    """Fresh drafters over already loaded draft models (one set per run)."""
    return [
        open_drafter(
            spec,
            target,
            load=lambda spec: models[spec],
            draft_prompts=lambda model: [model.chat_prompt(m) for m in messages],
            target_prompt_lens=[len(target.chat_prompt(m)) for m in messages],
        )
        for spec in specs
    ]


def _measure(
    target: SteerableModel,
    models: dict[str, SteerableModel],
    messages: list[Any],
    specs: Sequence[str],
    config: CollectiveConfig,
    learned: Learned,
) -> tuple[list[Response], float]:
    """Every prompt through the engine: the responses and the wall time of the run.
    ``learned``: the run's (one for the whole bench: every configuration prices the
    target's forwards by the curve the runs before it measured, as a server does)."""
    prompts = [target.chat_prompt(m) for m in messages]
    drafters = _drafters(specs, target, models, messages)
    started = time.perf_counter()
    try:
        responses = collective.generate(target, prompts, drafts=drafters, config=config, learned=learned)
    finally:
        for d in drafters:
            d.close()  # frees the drafters' sequences; the draft models stay loaded
    return responses, time.perf_counter() - started


def _measured_runs(
    config: CollectiveBenchConfig,
    batch: int,
    target: SteerableModel,
    models: dict[str, SteerableModel],
    messages: list[Any],
    categories: list[str],
    log: Callable[[str], None],
    near: dict[str, dict[str, float]],
    learned: Learned,
) -> Iterator[tuple[str, tuple[list[Response], float]]]:
    """Every configuration's runs at ``batch``, ``config.repeats`` of each: (name,
    (responses, wall seconds)), each repeat's runs in configuration order, plain first.

    With ``category_workloads``, each category's prompts run alone under every
    configuration in turn, ``config.repeats`` times (every other time in reverse order),
    before the next category: the runs a category's ratios compare lie a minute apart, not
    a whole pass of the suite, so a machine whose speed drifts (plain decoding's own two
    runs differed by up to 26% on one category, 20 minutes apart) moves them alike. Then
    the category's near price table is timed into ``near`` (``near_prices``). Each
    configuration's parts of one repeat are joined in suite order (``joined_run``)."""
    engines = [(name, specs, _with(e, max_batch=batch)) for name, specs, e in configurations(config)]
    if not config.category_workloads:
        for _ in range(config.repeats):
            for name, specs, engine in engines:
                yield name, _measure(target, models, messages, specs, engine, learned)
        return
    parts: dict[tuple[str, int], list[WorkloadPart]] = {}
    for category in dict.fromkeys(categories):
        mine = [i for i, c in enumerate(categories) if c == category]
        for repeat in range(config.repeats):
            for name, specs, engine in engines if repeat % 2 == 0 else engines[::-1]:
                responses, seconds = _measure(
                    target, models, [messages[i] for i in mine], specs, engine, learned
                )
                parts.setdefault((name, repeat), []).append(WorkloadPart(category, mine, responses, seconds))
                run = f" run {repeat + 1}" if config.repeats > 1 else ""
                log(f"batch {batch} {category} {name}{run}: {seconds:.1f} s")
        ran = [part for parts_of in parts.values() for part in parts_of if part.category == category]
        prompt = target.chat_prompt(messages[mine[0]])
        near[category] = near_prices(target, prompt, ran, batch, config.price_rounds)
        log(f"batch {batch} {category}: timed the forwards of {len(near[category])} shapes near its runs")
    for repeat in range(config.repeats):
        for name, _, _ in engines:
            yield name, joined_run(parts[(name, repeat)])


def measured_row(
    name: str,
    batch: int,
    runs: list[tuple[list[Response], float]],
    plain: list[list[int]] | None,
    categories: list[str],
) -> dict[str, Any]:
    """A configuration's row from its runs (responses, wall seconds): the fastest run's
    figures, each request's fastest per category, and identity across every run."""
    responses, wall_s = max(runs, key=lambda run: _decode_rate(*run))
    record = responses[0].extras
    records = [run[0].extras if run else {} for run, _ in runs]  # each run's engine record
    output = sum(len(r.tokens) for r in responses)
    latency = [wall_s / max(1, len(r.tokens)) for r in responses]
    return {
        "config": name,
        "batch": batch,
        "runs": len(runs),
        "tokens_per_s": round(output / wall_s if wall_s else 0.0, 3),
        "decode_tokens_per_s": round(_decode_rate(responses, wall_s), 3),
        "prefill_s": round(float(record.get("prefill_s", 0.0)), 3),
        "by_category": (
            workload_figures(records)
            if "workloads" in record
            else _by_category([run for run, _ in runs], categories)
        ),
        "by_category_runs": workload_runs(records),  # with workloads
        "decode_runs": [round(_decode_rate(*run), 3) for run in runs],
        "decode_tokens_runs": [tokens_after_first(run) for run, _ in runs],
        "forward_sizes_runs": [r.get("forward_sizes") or {} for r in records],
        "forwards_by_category_runs": forwards_by_category(records),
        "forward_shapes_runs": [r.get("forward_shapes") or {} for r in records],
        "shapes_by_category_runs": forwards_by_category(records, "workload_shapes"),
        "lengths_by_category_runs": forwards_by_category(records, "workload_lengths"),
        "split_pairs_by_category_runs": forwards_by_category(records, "workload_split_pairs"),
        "shape_ms_by_category_runs": forwards_by_category(records, "workload_shape_ms"),
        "normalized_latency_s": round(sum(latency) / len(latency), 4),
        "output_tokens": output,
        "wall_s": round(wall_s, 2),
        "acceptance": record.get("acceptance_by_draft", {}),
        "weights": list(record.get("weights", {}).values()),
        "s_history": record.get("s_history", []),
        "rounds": record.get("verifications", 0),
        "verify_s": record.get("verify_s"),  # seconds in the target's verifying forwards
        "rounds_drafting": list(record.get("rounds_drafting", {}).values()),  # per draft, gated
        "rounds_exploring": list(record.get("rounds_exploring", {}).values()),
        "pipelined_rounds": record.get("pipelined_rounds"),
        "predrafts_used": record.get("predrafts_used", 0),
        "identical": None
        if plain is None
        else sum(all(run[i].tokens == p for run, _ in runs) for i, p in enumerate(plain)),
    }


def _decode_rate(responses: list[Response], wall_s: float) -> float:
    """Tokens after each request's first over the run's time not spent reading prompts."""
    after_first = tokens_after_first(responses)
    prefill_s = float(responses[0].extras.get("prefill_s", 0.0)) if responses else 0.0
    return after_first / (wall_s - prefill_s) if wall_s > prefill_s else 0.0


def _by_category(runs: list[list[Response]], categories: list[str]) -> dict[str, list[float]]:
    """Per category: [tokens after each request's first, seconds from its first token to
    its last, seconds of those it stalled while other requests' prompts were read],
    summed over the category's requests, each request from its fastest run."""
    out: dict[str, list[float]] = {}
    for i, category in enumerate(categories):
        tokens, seconds, stalled = out.setdefault(category, [0, 0.0, 0.0])
        timed = [(n, t, w) for n, t, w in (_span(run[i]) for run in runs) if t is not None]
        if timed:
            n, t, w = max(timed, key=_span_rate)
            out[category] = [tokens + n, round(seconds + t, 4), round(stalled + w, 4)]
    return out


def _span(r: Response) -> tuple[int, float | None, float]:
    """A request's tokens after its first, the seconds from its first token to its last,
    and the seconds of those it stalled while the engine read other requests' prompts."""
    first, last = r.stats.first_token_at, r.stats.last_token_at
    if first is None or last is None:
        return 0, None, 0.0
    return max(0, len(r.tokens) - 1), last - first, r.stats.stalled_s


def _span_rate(span: tuple[int, float, float]) -> float:
    """A request's decode rate, its stalls left out (as the run's decode rate leaves the
    prefills out)."""
    n, seconds, stalled = span
    busy = seconds - stalled
    return n / busy if busy > 0 else float("inf")


def configurations(config: CollectiveBenchConfig) -> list[tuple[str, Sequence[str], CollectiveConfig]]:
    """(name, drafts, engine config) for every configuration at one batch size: each
    draft alone and every draft voted, gated (as the CLI runs them), and the vote with
    every draft drafting every round (``--every-draft``); ``default`` is the first single.
    With ``only``, plain decoding and those."""
    base = CollectiveConfig(max_tokens=config.max_tokens, draft_tokens=FIXED_S)
    out: list[tuple[str, Sequence[str], CollectiveConfig]] = [("plain", (), _with(base, draft_tokens=0))]
    out += [(f"single:{d}", (d,), base) for d in config.drafts]
    out += [
        ("majority-every-draft", config.drafts, _with(base, gate=None)),
        ("+majority", config.drafts, base),
        ("+selector", config.drafts, _with(base, draft_tokens="auto")),
        ("+pipeline", config.drafts, _with(base, draft_tokens="auto", pipeline=True)),
    ]
    return [c for c in out if not config.only or c[0] == "plain" or c[0] in config.only]


def _with(base: CollectiveConfig, **changes: Any) -> CollectiveConfig:
    return replace(base, **changes)


def load_bench_model(name: str, n_ctx: int) -> SteerableModel:
    """A llama.cpp model with one KV cache of ``n_ctx`` cells shared by all its sequences.

    Not per-sequence caches (``kv_unified=False``): llama.cpp then splits a batch into
    micro-batches of equally many tokens from consecutive sequence ids, so a batch of
    drafts of different lengths, or of requests whose ids are not consecutive, is decoded
    in several forwards (measured: four requests' plain step at four times the cost of
    one, in one run of three).
    """
    return load_model(name, backend="llama.cpp", n_ctx=n_ctx, n_seq_max=16, kv_unified=True)


def run_collective_bench(config: CollectiveBenchConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    from coinfer import catalog

    suite = bench_workload(config)
    messages = [p["messages"] for p in suite]
    categories = [str(p.get("category", "all")) for p in suite]
    for name in {config.target, *config.drafts} - {"ngram"}:
        if name in catalog.CATALOG:
            catalog.prepare(name)
    log(f"loading {config.target} and the drafts {', '.join(config.drafts)}…")
    cells = config.n_ctx * max(config.batch_sizes, default=1)  # every running request's window
    target = load_bench_model(config.target, cells)
    models = {d: load_bench_model(d, cells) for d in config.drafts if d != "ngram"}
    report: dict[str, Any] = {"config": {**vars(config)}, "environment": environment(), "rows": []}
    out = Path(config.out)
    learned = Learned()
    try:
        for batch in config.batch_sizes:
            _run_batch(config, batch, target, models, messages, categories, report, log, out, learned)
        sweep_batch = _sweep_batch(config)
        for s in range(1, 13) if config.sweep else ():
            engine = CollectiveConfig(max_tokens=config.max_tokens, draft_tokens=s, max_batch=sweep_batch)
            run = _measure(target, models, messages, config.drafts, engine, learned)
            report["rows"].append(measured_row(f"sweep:s={s}", sweep_batch, [run], None, categories))
            log(f"sweep s={s} at batch {sweep_batch}: {report['rows'][-1]['tokens_per_s']:.2f} tok/s")
            _write(out, report)
    finally:
        for model in models.values():
            model.close()
        target.close()
    return finish(report, config, out)


def _run_batch(
    config: CollectiveBenchConfig,
    batch: int,
    target: SteerableModel,
    models: dict[str, SteerableModel],
    messages: list[Any],
    categories: list[str],
    report: dict[str, Any],
    log: Callable[[str], None],
    out: Path,
    learned: Learned,
) -> None:
    """Every configuration at one batch size, ``config.repeats`` times in turn; each row
    is rewritten from its runs so far after every run (``measured_row``)."""
    runs: dict[str, list[tuple[list[Response], float]]] = {}
    plain: list[list[int]] | None = None
    near = report.setdefault("forward_ms_near", {}).setdefault(str(batch), {})
    for name, run in _measured_runs(config, batch, target, models, messages, categories, log, near, learned):
        mine = runs.setdefault(name, [])
        mine.append(run)
        plain = [r.tokens for r in mine[0][0]] if name == "plain" else plain
        row = measured_row(name, batch, mine, None if name == "plain" else plain, categories)
        _put(report["rows"], row)
        if name == f"single:{config.drafts[0]}":  # the ablation's Default: the same runs
            _put(report["rows"], {**row, "config": "default"})
        log(f"batch {batch} {name} (run {len(mine)}): {_decode_rate(*mine[-1]):.2f} decode tok/s")
        _write(out, report)
    price_batch(report, batch, target, target.chat_prompt(messages[0]), config.price_rounds, log)
    _write(out, report)


def price_batch(
    report: dict[str, Any],
    batch: int,
    target: SteerableModel,
    prompt: list[int],
    rounds: int,
    log: Callable[[str], None],
) -> None:
    """Time the target's forward of every shape the batch size's runs recorded, and of
    plain decoding's steps (``shapes_to_price``), into the report's price table for
    ``batch``; a table it replaces (``--reprice``) is kept in ``forward_ms_replaced``."""
    sizes = shapes_to_price([r for r in report["rows"] if r["batch"] == batch], batch)
    log(f"batch {batch}: timing the target's forwards of {len(sizes)} shapes, to price every run's forwards")
    tables = report.setdefault("forward_ms", {})
    if str(batch) in tables:
        report.setdefault("forward_ms_replaced", []).append({str(batch): tables[str(batch)]})
    tables[str(batch)] = forward_prices(target, prompt, sizes, rounds)


def _put(rows: list[dict[str, Any]], row: dict[str, Any]) -> None:
    """Replace the row of the same configuration and batch size, or append it."""
    at = [i for i, r in enumerate(rows) if (r["config"], r["batch"]) == (row["config"], row["batch"])]
    if at:
        rows[at[0]] = row
    else:
        rows.append(row)


def finish(report: dict[str, Any], config: CollectiveBenchConfig, out: Path) -> dict[str, Any]:
    """Summarize the rows and write ``results.json``, ``results.md`` and the plots."""
    from coinfer.bench.collective_plots import plot_all

    report["summary"] = summarize(
        report["rows"], config, report.get("forward_ms"), report.get("forward_ms_near")
    )
    _write(out, report)
    plot_all(out, report)
    return report


def _sweep_batch(config: CollectiveBenchConfig) -> int:
    return config.sweep_batch if config.sweep_batch in config.batch_sizes else config.batch_sizes[0]


def summarize(
    rows: list[dict[str, Any]],
    config: CollectiveBenchConfig,
    prices: dict[str, Any] | None = None,
    near: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Ratios to plain per batch size (overall and per category), the ablation, the sweep
    against the selector, the issue's targets; with repeats, every repeat's ratios; with
    ``prices`` (per batch size, ms of a forward of each shape) and ``near`` (per batch
    size and category), the priced ratios (``bench.collective_priced``)."""
    by = {(r["config"], r["batch"]): r for r in rows}
    ratio: dict[str, dict[str, float]] = {}
    for batch in config.batch_sizes:
        plain = by.get(("plain", batch))
        if not plain or not plain["tokens_per_s"]:
            continue
        ratio[str(batch)] = {
            name: round(r["tokens_per_s"] / plain["tokens_per_s"], 3)
            for (name, b), r in by.items()
            if b == batch and name != "plain" and not name.startswith("sweep")
        }
    stages = ("default", "+majority", "+selector", "+pipeline")
    ablation = {
        str(b): {stage: by[(stage, b)]["tokens_per_s"] for stage in stages if (stage, b) in by}
        for b in config.batch_sizes
    }
    sweep = {r["config"].split("=")[1]: r["tokens_per_s"] for r in rows if r["config"].startswith("sweep")}
    best_fixed = max(sweep.values(), default=0.0)
    sweep_batch = _sweep_batch(config)
    selector = by.get(("+selector", sweep_batch), {}).get("tokens_per_s")
    acceptance = {
        str(b): {
            **{d: by.get((f"single:{d}", b), {}).get("acceptance", {}).get(d) for d in config.drafts},
            "voted": by.get(("+majority", b), {}).get("acceptance", {}).get("voted"),
        }
        for b in config.batch_sizes
    }
    per_category = {str(b): _category_ratios(by, b) for b in config.batch_sizes}
    return {
        "throughput_ratio_vs_plain": ratio,
        "per_category": per_category,
        "repeats": {str(b): repeat_figures(by, b) for b in config.batch_sizes},
        "priced": {
            str(b): priced_figures(by, b, (prices or {}).get(str(b)), (near or {}).get(str(b)))
            for b in config.batch_sizes
        },
        "ablation": ablation,
        "sweep": {
            "batch": sweep_batch,
            "tokens_per_s_by_s": sweep,
            "selector": selector,
            "selector_vs_best_fixed": round(selector / best_fixed, 3) if selector and best_fixed else None,
        },
        "acceptance": acceptance,
        "targets": _targets(by, config, acceptance, per_category),
    }


def _category_ratios(by: dict[tuple[str, int], dict[str, Any]], batch: int) -> dict[str, dict[str, float]]:
    """Per configuration and category: its requests' decode rate over plain decoding's,
    the stalls for other requests' prompts left out (results of old runs have none); with
    category workloads run more than once, the median of each repeat's ratio
    (``bench.collective_priced.paired_category_ratios``)."""
    plain = _category_rates(by.get(("plain", batch), {}))
    out: dict[str, dict[str, float]] = {}
    for name in compared(by, batch):
        mine = _category_rates(by[(name, batch)])
        out[name] = {c: round(v / plain[c], 3) for c, v in mine.items() if c in plain}
        out[name].update(
            {c: median(v) for c, v in paired_category_ratios(by, name, batch).items() if len(v) > 1}
        )
    return out


def _category_rates(row: dict[str, Any]) -> dict[str, float]:
    """A row's decode rate per category: tokens over seconds less stalls."""
    out = {}
    for category, (tokens, seconds, *stalled) in (row.get("by_category") or {}).items():
        busy = seconds - sum(stalled)
        if tokens and busy > 0:
            out[category] = tokens / busy
    return out


def _targets(
    by: dict[tuple[str, int], dict[str, Any]],
    config: CollectiveBenchConfig,
    acceptance: dict[str, Any],
    per_category: dict[str, dict[str, dict[str, float]]],
) -> dict[str, Any]:
    """The issue's targets, as measured, per batch size: the voted engine (``+majority``)
    against the best single draft; the worst ratio to plain of any configuration a user
    can run (each single draft and the engine's stages; not ``--every-draft``), overall
    and per category; the pipeline's gain; and the copy categories' ratios."""
    out: dict[str, Any] = {}
    for b in config.batch_sizes:
        tps = {name: r["tokens_per_s"] for (name, bb), r in by.items() if bb == b}
        singles = {n: v for n, v in tps.items() if n.startswith("single:")}
        best_single = max(singles.values(), default=None)
        single_acc = [a for d, a in acceptance[str(b)].items() if d != "voted" and a is not None]
        cats = per_category.get(str(b), {})
        runnable = [n for n in tps if n.startswith("single:") or n in ENGINE_CONFIGS]
        worst = [(_ratio(tps[n], tps.get("plain")), n, "all") for n in runnable]
        worst += [(v, n, c) for n in runnable for c, v in cats.get(n, {}).items()]
        low = min(((v, n, c) for v, n, c in worst if v is not None), default=None)
        out[str(b)] = {
            "majority_vs_best_single": _ratio(tps.get("+majority"), best_single),
            "voted_acceptance_minus_best_single": (
                round(acceptance[str(b)]["voted"] - max(single_acc), 3)
                if acceptance[str(b)]["voted"] is not None and single_acc
                else None
            ),
            "worst_vs_plain": None if low is None else {"ratio": low[0], "config": low[1], "where": low[2]},
            "pipeline_vs_selector": _ratio(tps.get("+pipeline"), tps.get("+selector")),
            "copy_categories": {
                n: {c: v for c, v in cats.get(n, {}).items() if c in COPY_CATEGORIES} for n in ENGINE_CONFIGS
            },
        }
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def _write(out: Path, report: dict[str, Any]) -> None:
    write_json(out / "results.json", report)
    write_markdown(out / "results.md", markdown(report))
