"""``coinfer bench jupiter``: one model served by two devices, against one device and the
plain pipelines users run today (paper 004).

This process is device 0 (pinned to core 0); each other device is a ``coinfer edge
worker`` process pinned to its own core, joined over loopback by torch.distributed
(gloo). Systems, each over the same prompts:

- ``single``: one device holds the whole model (same backend, one core);
- ``plain-memory``: a plain pipeline (the prompt in one piece) with exo's
  memory-proportional layer split;
- ``plain-jupiter``: a plain pipeline with Jupiter's profiled layer plan (Eq. 1);
- ``jupiter``: Jupiter's layer plan and intra-sequence pipelined prefill (Eq. 2-4).

Pairs: two equal devices (1 core each) and a heterogeneous pair, where the second device
gets half a core (a CPU cgroup quota). Prompts of 128-1024 tokens from two sources: the
CPython documentation and the speculative suite's code, neither used to tune anything.
Also:

- the equal pair across a veth pair into a network namespace shaped with ``tbf`` (100 Mbit/s
  and 1 Gbit/s; ``GLOO_SOCKET_IFNAME`` puts gloo on it), prompts of 512 tokens or more;
- the memory case: a budget one device cannot meet is refused; two devices run a request,
  each in a memory cgroup of its budget;
- the layer planner against exhaustive search;
- the peer users would pick, llama.cpp's RPC backend over the same cores
  (``bench/jupiter_rpc.py``; ``--build-peers`` builds it), else listed in ``skipped``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from coinfer.bench.netns import HOST, ShapedLink
from coinfer.bench.report import environment, pyplot, write_json, write_markdown
from coinfer.engines.jupiter.worker import worker_command
from coinfer.errors import BudgetError, CoinferError, ConfigError, ModelError
from coinfer.transport.ports import free_loopback_port

__all__ = ["JupiterBenchConfig", "run_jupiter_bench", "summarize"]

SYSTEMS = ("single", "plain-memory", "plain-jupiter", "jupiter")
CPU_ROOT = Path("/sys/fs/cgroup/cpu")


@dataclass(frozen=True)
class JupiterBenchConfig:
    out: str
    model: str = "qwen2.5-coder-0.5b"
    lengths: tuple[int, ...] = (128, 256, 512, 1024)
    max_tokens: int = 16
    quick: bool = False
    slow_share: float = 0.5
    memory_gb: float = 1.9
    link_mbit: tuple[int, ...] = (100, 1000)
    build_peers: bool = False
    repeats: int = 3  # TTFT: the median of this many runs per prompt and system

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.max_tokens < 1:
            raise ConfigError("repeats and max_tokens must be >= 1")


def _texts() -> dict[str, str]:
    """Two long texts to cut prompts from: CPython's documentation and the suite's code."""
    from pydoc_data.topics import topics

    from coinfer.bench.workloads import build_suite

    docs = "\n\n".join(v for _, v in sorted(topics.items()) if len(v) >= 3000)
    code = "\n\n".join(p["messages"][0]["content"] for p in build_suite(4) if p["category"] == "edit")
    return {"docs": docs, "suite": code}


def _prompts(text: Any, lengths: tuple[int, ...]) -> list[dict[str, Any]]:
    """A chat prompt of about each length from each source (``text`` is the tokenizer)."""
    out = []
    for source, body in _texts().items():
        ids = text.tokenize(body)
        for n in lengths:
            start = (n * 7) % max(len(ids) - n, 1)
            chunk = text.detokenize(ids[start : start + n - 30])
            prompt = text.user_prompt(f"Summarize what follows in two sentences.\n\n{chunk}")
            out.append({"id": f"{source}/{n}", "source": source, "ids": prompt})
    return out


class _Workers:
    """``coinfer edge worker`` processes for ranks 1.., pinned; the slow one in a CPU cgroup;
    behind a shaped ``link``, in its namespace, gloo on its interface."""

    def __init__(
        self, world: int, master: str, token: str, slow_share: float | None, link: ShapedLink | None
    ) -> None:
        env = {**os.environ, "COINFER_EDGE_TOKEN": token}
        if link is not None:
            env["GLOO_SOCKET_IFNAME"] = link.peer_if
        self.procs = []
        self.group: Path | None = None
        for rank in range(1, world):
            name = "slow" if slow_share else f"device{rank}"
            cmd = worker_command(rank, world, master, [rank % (os.cpu_count() or 1)], name)
            if link is not None:
                cmd = link.prefix + cmd
            proc = subprocess.Popen(cmd, env=env, start_new_session=True)
            if slow_share:
                self.group = _cpu_share(proc.pid, slow_share)
            self.procs.append(proc)

    def close(self) -> None:
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.group is not None:
            self.group.rmdir()


def _cpu_share(pid: int, share: float) -> Path:
    """Put ``pid`` in a CPU cgroup (v1) that may use ``share`` of one core."""
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists() or os.geteuid() != 0:
        raise BudgetError("a heterogeneous pair needs root and the v1 CPU controller")
    group = CPU_ROOT / f"coinfer-jupiter-{pid}"
    group.mkdir(exist_ok=True)
    (group / "cpu.cfs_period_us").write_text("100000")
    (group / "cpu.cfs_quota_us").write_text(str(int(100000 * share)))
    (group / "tasks").write_text(str(pid))
    return group


def start_cluster(
    config: JupiterBenchConfig,
    world: int,
    split: str,
    slow: float | None,
    link: ShapedLink | None = None,
    worker_pids: list[int] | None = None,
    **kw: Any,
) -> Any:
    import secrets

    from coinfer.engines.jupiter import EdgeCluster

    master = f"{HOST if link else '127.0.0.1'}:{free_loopback_port()}"
    token = secrets.token_hex(8)
    if link is not None:  # read when this process joins the group (``_links`` unsets it)
        os.environ["GLOO_SOCKET_IFNAME"] = link.host_if
    workers = _Workers(world, master, token, slow, link) if world > 1 else None
    if worker_pids is not None and workers is not None:
        worker_pids += [p.pid for p in workers.procs]
    try:
        cluster = EdgeCluster(
            config.model, world=world, master=master, threads=1, split=split, token=token, **kw
        )
    except BaseException:
        if workers is not None:
            for p in workers.procs:
                p.kill()
            workers.close()
        raise
    return cluster, workers


def _row(p: dict[str, Any], r: Any, ttfts: list[float]) -> dict[str, Any]:
    """One prompt's figures: TTFT is the median of the repeats (the first also decodes)."""
    import statistics

    s, devices = r.stats, r.extras["devices"]
    ttft = statistics.median(ttfts)
    return {
        "prompt": p["id"], "source": p["source"], "prompt_tokens": s.prompt_tokens, "text": r.text,
        "ttft_s": round(ttft, 4), "ttft_runs_s": [round(t, 4) for t in ttfts],
        "prefill_ms_per_token": round(1000 * ttft / s.prompt_tokens, 3),
        "decode_ms_per_token": round(1000 / s.decode_tokens_per_s, 2) if s.decode_tokens_per_s else None,
        "parts": r.extras["parts"], "bytes_between_stages": sum(d["bytes_sent"] for d in devices),
        "peak_rss_mb": [round(d["peak_rss"] / 2**20) for d in devices],
        "layers": [d["layers"] for d in devices],
    }  # fmt: skip


def _run_systems(
    cluster: Any, prompts: list[dict[str, Any]], config: JupiterBenchConfig, names: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """Every system of one cluster on every prompt, ``config.repeats`` times, the systems
    interleaved prompt by prompt so that a drift in the machine's speed falls on all alike."""
    from coinfer.engines.jupiter import JupiterConfig, generate

    generate(cluster, prompts[0]["ids"][:64], config=JupiterConfig(max_tokens=2))  # warm up
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for p in prompts:
        first: dict[str, Any] = {}
        ttfts: dict[str, list[float]] = {name: [] for name in names}
        for rep in range(config.repeats):
            for name in names:
                jc = JupiterConfig(
                    max_tokens=1 if rep else config.max_tokens, pipelined_prefill=name == "jupiter"
                )
                r = generate(cluster, p["ids"], config=jc)
                first.setdefault(name, r)
                ttfts[name].append(r.stats.ttft_s)
        for name in names:
            rows[name].append(_row(p, first[name], ttfts[name]))
    return rows


def _pair(
    config: JupiterBenchConfig, prompts: list[dict[str, Any]], slow: float | None, log: Callable[[str], None]
) -> dict[str, Any]:
    from coinfer.engines.jupiter.planner import exhaustive_layers

    results: dict[str, Any] = {}
    gaps = []
    for split, systems in (
        ("single", ["single"]),
        ("memory", ["plain-memory"]),
        ("jupiter", ["plain-jupiter", "jupiter"]),
    ):
        if split == "single" and slow:
            continue
        world = 1 if split == "single" else 2
        cluster, workers = start_cluster(config, world, "jupiter" if split == "single" else split, slow)
        try:
            if world == 2 and split == "jupiter":
                times, layer_bytes, budgets = cluster._layer_inputs()
                best = exhaustive_layers(times, layer_bytes, budgets)
                gaps.append(cluster.layer_plan.bottleneck_s / best - 1)
            log(f"jupiter bench: {'hetero' if slow else 'equal'} pair, {' and '.join(systems)}")
            results.update(_run_systems(cluster, prompts, config, systems))
        finally:
            cluster.close()
            if workers is not None:
                workers.close()
    return {"systems": results, "planner_gap": gaps}


def _links(config: JupiterBenchConfig, prompts: list[dict[str, Any]], log: Callable[[str], None]) -> Any:
    """The equal pair's plain pipeline and Jupiter across a veth pair shaped with ``tbf``,
    on the prompts of 512 tokens or more."""
    long = [p for p in prompts if len(p["ids"]) >= 512]
    out: dict[str, Any] = {}
    for rate in config.link_mbit:
        with ShapedLink(rate) as link:
            cluster, workers = start_cluster(config, 2, "jupiter", None, link)
            try:
                out[f"{rate}mbit"] = {"link": asdict(cluster.links[0]), "systems": {}}
                log(f"jupiter bench: equal pair over {rate} Mbit/s")
                out[f"{rate}mbit"]["systems"] = _run_systems(
                    cluster, long, config, ["plain-jupiter", "jupiter"]
                )
            finally:
                cluster.close()
                workers.close()
                os.environ.pop("GLOO_SOCKET_IFNAME", None)
    return out


def _memory_case(config: JupiterBenchConfig, prompt: list[int]) -> dict[str, Any]:
    """A budget one device cannot meet is refused by the planner; two devices run a
    request, each held to its budget by a memory cgroup (entered once the plan fits, as
    ``coinfer edge launch --memory`` does)."""
    from coinfer.engines.jupiter import JupiterConfig, generate
    from coinfer.sandbox.cgroup import MemoryCgroup, fence_each, remove_all

    budget = config.memory_gb * 2**30
    out: dict[str, Any] = {"budget_gb_per_device": config.memory_gb}
    try:
        cluster, _ = start_cluster(config, 1, "jupiter", None, budgets=[budget])
        cluster.close()
        out["single"] = "ran"
    except CoinferError as exc:
        out["single"] = f"refused: {str(exc).splitlines()[0]}"
    groups = [MemoryCgroup(int(budget), prefix="coinfer-jupiter-bench") for _ in range(2)]
    pids: list[int] = [os.getpid()]  # the worker's joins when it starts
    cluster, workers = start_cluster(config, 2, "jupiter", None, budgets=[budget, budget],
                                before_load=fence_each(groups, pids), worker_pids=pids)  # fmt: skip
    try:
        response = generate(cluster, prompt, config=JupiterConfig(max_tokens=config.max_tokens))
        out["two"] = {
            "layers": [list(r) for r in cluster.layer_plan.ranges],
            "prompt_tokens": len(prompt),
            "ttft_s": round(response.stats.ttft_s, 4),
            "cgroup_peak_mb": [g.peak() // 2**20 for g in groups],
            "oom_kills": sum(g.oom_kills() for g in groups),
        }
    finally:
        cluster.close()
        workers.close()
        remove_all(groups, member=os.getpid())
    return out


def _ratio(
    rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]], *, source: str | None = None
) -> float | None:
    """Geometric mean over prompts of >= 512 tokens of ``a``'s TTFT over ``b``'s."""
    import math

    pairs = [
        (a["ttft_s"], b["ttft_s"])
        for a, b in zip(rows_a, rows_b, strict=True)
        if a["prompt_tokens"] >= 512 and (source is None or a["source"] == source)
    ]
    if not pairs:
        return None
    return round(math.exp(sum(math.log(x / y) for x, y in pairs) / len(pairs)), 3)


def _peers(
    config: JupiterBenchConfig,
    prompts: list[dict[str, Any]],
    skipped: dict[str, str],
    log: Callable[[str], None],
) -> dict[str, Any] | None:
    """llama.cpp's RPC backend, where it is built (``--build-peers`` builds it)."""
    from coinfer.bench.jupiter_rpc import rpc_binaries, run_rpc_peer

    try:
        if rpc_binaries(build=config.build_peers) is None:
            raise ModelError("not built", hint="run the bench with --build-peers (about 10 minutes)")
        return run_rpc_peer(config.model, prompts, config.max_tokens, log)
    except (CoinferError, OSError, subprocess.CalledProcessError) as exc:
        skipped["llama.cpp-rpc"] = f"{str(exc).splitlines()[0]} ({getattr(exc, 'hint', '')})"
        return None


def _link_summary(links: dict[str, Any] | None) -> dict[str, Any]:
    return {
        rate: {"prefill_speedup_vs_plain": _ratio(v["systems"]["plain-jupiter"], v["systems"]["jupiter"]),
               "link_mbit_measured": round(v["link"]["bytes_per_s"] * 8 / 1e6, 1)}
        for rate, v in (links or {}).items()
    }  # fmt: skip


def _decode_ratio(rows_a: list[dict[str, Any]], rows_b: list[dict[str, Any]]) -> float | None:
    """Geometric mean of ``a``'s decode time per token over ``b``'s (above 1: ``a`` slower)."""
    import math

    pairs = [
        (a["decode_ms_per_token"], b["decode_ms_per_token"]) for a, b in zip(rows_a, rows_b, strict=True)
    ]
    pairs = [(x, y) for x, y in pairs if x and y]
    return round(math.exp(sum(math.log(x / y) for x, y in pairs) / len(pairs)), 3) if pairs else None


def summarize(
    equal: dict[str, Any],
    hetero: dict[str, Any] | None,
    links: dict[str, Any] | None,
    peers: dict[str, Any] | None,
) -> dict[str, Any]:
    e = equal["systems"]
    single = [r["text"] for r in e["single"]]
    identical = all([r["text"] for r in rows] == single for rows in e.values())
    out: dict[str, Any] = {
        "prefill_speedup_vs_plain": _ratio(e["plain-memory"], e["jupiter"]),
        "prefill_speedup_vs_plain_jupiter_layers": _ratio(e["plain-jupiter"], e["jupiter"]),
        "prefill_speedup_vs_single": _ratio(e["single"], e["jupiter"]),
        "by_source": {
            src: {
                "vs_plain": _ratio(e["plain-memory"], e["jupiter"], source=src),
                "vs_single": _ratio(e["single"], e["jupiter"], source=src),
            }
            for src in ("docs", "suite")
        },  # fmt: skip
        "planner_gap_vs_exhaustive": round(
            max(equal["planner_gap"] + (hetero or {}).get("planner_gap", [])), 4
        ),
        "outputs_identical": identical,
        "links": _link_summary(links),
    }
    if peers is not None:
        out["llamacpp_rpc_prefill_speedup_vs_its_single"] = _ratio(
            peers["llama.cpp-single"], peers["llama.cpp-rpc"]
        )
        out["llamacpp_rpc_decode_ms_ratio_vs_its_single"] = _decode_ratio(
            peers["llama.cpp-rpc"], peers["llama.cpp-single"]
        )
        out["jupiter_decode_ms_ratio_vs_single"] = _decode_ratio(e["jupiter"], e["single"])
        out["llamacpp_rpc_outputs_identical"] = [r["tokens"] for r in peers["llama.cpp-rpc"]] == [
            r["tokens"] for r in peers["llama.cpp-single"]
        ]
    if hetero is not None:
        h = hetero["systems"]
        out["hetero_plain_speedup_jupiter_layers_vs_memory_split"] = _ratio(
            h["plain-memory"], h["plain-jupiter"]
        )
        out["hetero_prefill_speedup_vs_plain"] = _ratio(h["plain-memory"], h["jupiter"])
        out["hetero_outputs_identical"] = all([r["text"] for r in rows] == single for rows in h.values())
    return out


def _markdown(report: dict[str, Any]) -> str:
    lines = ["# Jupiter: one model on two devices (`coinfer bench jupiter`)", "",
             f"Model {report['config']['model']}; device 0 is core 0, device 1 core 1 (the heterogeneous "
             "pair: half of core 1, a CPU cgroup quota). Links are loopback, unlimited, except in the "
             "rows whose pair names a rate: a veth pair into a network namespace shaped with `tbf`.", "",
             "| pair | system | prompt | tokens | parts | TTFT s | prefill ms/tok | decode ms/tok | bytes "
             "| peak MB |",
             "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    pairs = [
        ("equal", report.get("equal")),
        ("hetero", report.get("hetero")),
        *(report.get("links") or {}).items(),
    ]
    for pair, result in pairs:
        for name, rows in (result or {}).get("systems", {}).items():
            for r in rows:
                lines.append(
                    f"| {pair} | {name} | {r['prompt']} | {r['prompt_tokens']} | {len(r['parts'])} | "
                    f"{r['ttft_s']} | {r['prefill_ms_per_token']} | {r['decode_ms_per_token']} | "
                    f"{r['bytes_between_stages']} | {r['peak_rss_mb']} |"
                )
    if report.get("peers"):
        lines += [
            "",
            "llama.cpp (the catalogue's GGUF, 1 thread per device): alone on core 0, and its RPC "
            "backend with a `ggml-rpc-server` on each of cores 0 and 1.",
            "",
            "| system | prompt | tokens | TTFT s | prefill ms/tok | decode ms/tok |",
            "|---|---|---|---|---|---|",
        ]
        for name, rows in report["peers"].items():
            for r in rows:
                cells = (name, r["prompt"], r["prompt_tokens"], r["ttft_s"], r["prefill_ms_per_token"],
                         r["decode_ms_per_token"])  # fmt: skip
                lines.append("| " + " | ".join(map(str, cells)) + " |")
    lines += [
        "",
        "Memory case, skipped parts:",
        "",
        "```json",
        json.dumps({"memory": report.get("memory"), "skipped": report.get("skipped")}, indent=2),
        "```",
        "",
        "## Summary",
        "",
        "```json",
        json.dumps(report["summary"], indent=2),
        "```",
        "",
    ]
    return "\n".join(lines)


def _plot(report: dict[str, Any], out: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, rows in report["equal"]["systems"].items():
        docs = [r for r in rows if r["source"] == "docs"]
        ax.plot([r["prompt_tokens"] for r in docs], [r["ttft_s"] for r in docs], marker="o", label=name)
    ax.set_xlabel("prompt tokens (CPython docs)")
    ax.set_ylabel("time to first token, s")
    ax.set_title("two equal devices, 1 core each")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "ttft.png", dpi=120)
    plt.close(fig)


def run_jupiter_bench(config: JupiterBenchConfig, *, log: Callable[[str], None]) -> dict[str, Any]:
    import torch

    out = Path(config.out)
    os.sched_setaffinity(0, [0])
    torch.set_num_threads(1)
    lengths = (512,) if config.quick else config.lengths
    probe, _ = start_cluster(config, 1, "jupiter", None)
    prompts = _prompts(probe.text, lengths)
    probe.close()
    started = time.time()
    skipped: dict[str, str] = {}
    peers = _peers(config, prompts, skipped, log)
    equal = _pair(config, prompts, None, log)
    hetero = links = memory = None
    try:
        hetero = _pair(config, prompts, config.slow_share, log)
    except BudgetError as exc:
        skipped["hetero"] = str(exc)
    try:
        links = _links(config, prompts, log)
    except ConfigError as exc:
        skipped["links"] = str(exc).splitlines()[0]
    try:
        memory = _memory_case(config, prompts[-1]["ids"])
    except BudgetError as exc:
        skipped["memory"] = str(exc).splitlines()[0]
    report = {
        "config": {**config.__dict__, "lengths": list(lengths)},
        "environment": environment(),
        "equal": equal,
        "hetero": hetero,
        "links": links,
        "peers": peers,
        "memory": memory,
        "skipped": skipped,
        "seconds": round(time.time() - started, 1),
    }
    report["summary"] = summarize(equal, hetero, links, peers)
    write_json(out / "results.json", report)
    write_markdown(out / "README.md", _markdown(report))
    _plot(report, out)
    return report
