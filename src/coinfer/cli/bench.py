"""``coinfer bench decode|speculative|collective|minions|llmcad|dragon``: the benchmarks, each writing
``results.json``, a Markdown table and plots; ``--json`` prints the summary to stdout."""

from __future__ import annotations

import argparse
import json
from typing import Any

from coinfer import catalog
from coinfer.cli.common import DEFAULT_MODEL, add_output_flags, add_pair_flags, err
from coinfer.errors import ConfigError

__all__ = ["add_parser"]


def _done(args: argparse.Namespace, summary: Any, lines: list[str]) -> int:
    """Print the summary: JSON on stdout with ``--json``, else readable lines on stderr."""
    if args.json:
        print(json.dumps(summary, ensure_ascii=False))
    else:
        for line in lines:
            err(line)
    return 0


def cmd_decode(args: argparse.Namespace) -> int:
    if args.device == "cuda":
        return _cuda_decode(args)
    from coinfer.bench.decode import DecodeBenchConfig, run_decode_bench

    config = DecodeBenchConfig(
        out=args.out,
        models=tuple(args.models or catalog.CATALOG),
        backends=tuple(args.backends),
        ks=tuple(args.ks or [1, 2, 4, 8, 16, 32]),
        decode_tokens=args.decode_tokens,
        repeats=args.repeats,
        n_threads=args.threads,
        transformers_models=tuple(args.transformers_models) if args.transformers_models else None,
    )
    report = run_decode_bench(config, log=err)
    return _done(
        args, report["results"], [f"wrote {report['files']['json']} and {report['files']['markdown']}"]
    )


def _cuda_decode(args: argparse.Namespace) -> int:
    from coinfer.bench.decode_cuda import CudaDecodeConfig, run_cuda_decode_bench

    given = {
        "models": tuple(args.models) if args.models else None,
        "ks": tuple(args.ks) if args.ks else None,
        "batches": tuple(args.batches) if args.batches else None,
        "identity_models": tuple(args.identity_models) if args.identity_models is not None else None,
        "identity_prompts": args.identity_prompts,
    }
    config = CudaDecodeConfig(
        out=args.out, repeats=args.repeats, **{k: v for k, v in given.items() if v is not None}
    )
    report = run_cuda_decode_bench(config, log=err)
    return _done(
        args, report["results"], [f"wrote {report['files']['json']} and {report['files']['markdown']}"]
    )


def cmd_speculative(args: argparse.Namespace) -> int:
    from coinfer.bench.speculative import PEERS, SpecBenchConfig, run_speculative_bench

    config = SpecBenchConfig(
        out=args.out,
        target=args.target,
        max_tokens=args.max_tokens,
        quick=args.quick,
        prompts=args.prompts,
        peers=tuple(PEERS if args.peers is None else args.peers),
        n_threads=args.threads,
        build_peers=args.build_peers,
        heads=args.heads,
        suite=args.prompt_suite,
        split=args.split,
        repeats=args.repeats,
        profile=args.profile,
    )
    report = run_speculative_bench(config, log=err)
    s = report["summary"]
    line = (
        f"coinfer: geomean {s['geomean_speedup']}x, min {s['min_speedup']}x, per category "
        f"{s['per_category']}, identical {s['identical_outputs']}/{s['total_prompts']}; "
        f"wrote {args.out}/results.json"
    )
    return _done(args, {"coinfer": s, "peers": report["peers"]}, [line])


def cmd_collective(args: argparse.Namespace) -> int:
    from coinfer.bench.collective import CollectiveBenchConfig, run_collective_bench
    from coinfer.bench.collective_priced import PRICE_ROUNDS
    from coinfer.bench.collective_reprice import reprice

    rounds = PRICE_ROUNDS if args.price_rounds is None else args.price_rounds
    if args.reprice:
        report = reprice(args.out, rounds, log=err)
        return _done(args, report["summary"], [*_ratio_lines(report), f"repriced {args.out}/results.json"])
    config = CollectiveBenchConfig(
        out=args.out,
        target=args.target,
        drafts=tuple(d.strip() for d in args.drafts.split(",") if d.strip()),
        batch_sizes=tuple(args.batch_sizes),
        max_tokens=args.max_tokens,
        quick=args.quick,
        prompts=args.prompts,
        suite=args.prompt_suite,
        split=args.split,
        sweep=not args.no_sweep,
        repeats=args.repeats,
        only=tuple(args.only),
        per_category=args.per_category,
        category_workloads=args.category_workloads,
        price_rounds=rounds,
    )
    report = run_collective_bench(config, log=err)
    return _done(args, report["summary"], [*_ratio_lines(report), f"wrote {args.out}/results.json"])


def _ratio_lines(report: dict[str, Any]) -> list[str]:
    """Per batch size, every configuration's priced ratio to plain decoding where the runs
    were priced, else its ratio by the clock."""
    summary = report["summary"]
    priced = {b: f["median"] for b, f in (summary.get("priced") or {}).items() if f}
    if priced:
        return [
            f"batch {batch} priced: " + ", ".join(f"{n} {r['all']}x" for n, r in by.items() if "all" in r)
            for batch, by in priced.items()
        ]
    return [
        f"batch {batch}: " + ", ".join(f"{name} {r}x" for name, r in ratios.items())
        for batch, ratios in summary["throughput_ratio_vs_plain"].items()
    ]


def cmd_copy_bound(args: argparse.Namespace) -> int:
    from coinfer.bench.copy_bound import CopyBoundConfig, run_copy_bound

    categories = tuple(c.strip() for c in args.categories.split(",") if c.strip())
    config = CopyBoundConfig(out=args.out, target=args.target, categories=categories, split=args.split,
                             per_category=args.per_category, max_tokens=args.max_tokens)  # fmt: skip
    report = run_copy_bound(config, log=err)
    lines = [
        f"{c}: {s['bound']}x free, {s['bound_on_this_machine']}x on this machine "
        f"({s['tokens']} tokens in {s['rounds']} rounds)"
        for c, s in report["summary"].items()
    ]
    return _done(args, report["summary"], [*lines, f"wrote {args.out}/results.json"])


def cmd_minions(args: argparse.Namespace) -> int:
    from coinfer.bench.minions import PROTOCOLS, MinionsBenchConfig, run_minions_bench

    config = MinionsBenchConfig(
        out=args.out,
        limit=args.limit,
        protocols=tuple(args.protocols or PROTOCOLS),
        local=args.local,
        remote=args.remote,
        remote_base_url=args.remote_base_url,
        price_as=args.price_as,
        parallel=args.parallel,
        questions=tuple(args.questions or ()),
        chunk_chars=args.chunk_chars,
        concurrency=not args.no_concurrency,
    )
    report = run_minions_bench(config, log=err)
    lines = [
        f"{name}: accuracy {s['accuracy']:.0%}, {s['remote_prompt_tokens']:,.0f} remote prefill tokens, "
        f"${s['cost_usd']:.5f} per question"
        for name, s in report["summary"].items()
    ]
    if "concurrency" in report:
        lines.append(f"local jobs together vs one at a time: {report['concurrency']['speedup']}x")
    return _done(args, report["summary"], [*lines, f"wrote {args.out}/results.json"])


def _suite_flags(
    p: argparse.ArgumentParser, *, out: str, max_tokens: int, quick: str = "2 prompts per category"
) -> None:
    """The flags of the benchmarks that run a prompt suite on a target."""
    p.add_argument("--out", default=out)
    p.add_argument("--target", default=DEFAULT_MODEL)
    p.add_argument("--max-tokens", type=int, default=max_tokens)
    p.add_argument("--quick", action="store_true", help=quick)
    p.add_argument("--prompts", default=None, help='JSON lines {"id", "category", "messages"}')
    add_output_flags(p)


def _split_flags(p: argparse.ArgumentParser) -> None:
    """Which public suite, and which part of it."""
    p.add_argument(
        "--suite", dest="prompt_suite", default="committed", choices=["committed", "broad"],
        help="committed: 3 categories; broad: 7 categories of everyday use (default: %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--split", default="all", choices=["all", "tune", "held-out"],
        help="per category, the held-out fourth of the prompts or the tune rest (default: all)",
    )  # fmt: skip


def cmd_llmcad(args: argparse.Namespace) -> int:
    from coinfer.bench.llmcad import LLMCadBenchConfig, run_llmcad_bench
    from coinfer.bench.llmcad_systems import SYSTEMS

    config = LLMCadBenchConfig(
        out=args.out,
        target=args.target,
        draft=args.draft,
        max_tokens=args.max_tokens,
        quick=args.quick,
        prompts=args.prompts,
        budget_fraction=args.budget_fraction,
        systems=tuple(args.systems or SYSTEMS),
    )
    report = run_llmcad_bench(config, log=err)
    s = report["summary"]
    line = (
        f"llmcad under {s['budget_mib']} MiB: speedup over {s['speedup_vs']}, verifications/token "
        f"{s['verifications_per_token']}, identical {s['identical_outputs']}/{s['total_prompts']}; "
        f"wrote {args.out}/results.json"
    )
    return _done(args, s, [line])


def _add_llmcad(bench: Any) -> None:
    p = bench.add_parser("llmcad", help="LLMCad against the target alone and peers, under a memory budget")
    _suite_flags(
        p,
        out="bench-results/llmcad",
        max_tokens=64,
        quick="1 prompt per category and one budget (default: 2, and 0.25/0.33/0.5)",
    )
    p.add_argument("--draft", default="qwen2.5-coder-0.5b", help="the resident draft (default: %(default)s)")
    p.add_argument(
        "--budget-fraction",
        type=float,
        default=0.33,
        help="the budget: the draft's weights plus this fraction of the target's (default: %(default)s)",
    )
    p.add_argument("--systems", nargs="*", default=None, help="default: std stdpl sp bld auto llmcad")
    p.set_defaults(func=cmd_llmcad)


def cmd_dragon(args: argparse.Namespace) -> int:
    from coinfer.bench.dragon import SYSTEMS, DragonBenchConfig, run_dragon_bench
    from coinfer.bench.dragon_lm import LmWorkload

    config = DragonBenchConfig(
        out=args.out,
        model=args.model,
        max_tokens=args.max_tokens,
        delays=tuple(ms / 1000 for ms in args.delays_ms),
        questions=args.questions,
        limit=args.limit,
        quick=args.quick,
        workloads=tuple(args.workloads),
        systems=tuple(args.systems or SYSTEMS),
        bandwidth_mbit=args.bandwidth_mbit,
        device_model=args.device_model,
        **({"lm": LmWorkload(window=args.lm_window, windows=args.lm_windows)} if not args.quick else {}),
    )
    report = run_dragon_bench(config, log=err)
    s = report["summary"]
    line = (
        f"DRAGON against DRDG/TW, latency reduction by delay: {s['latency_reduction_vs_tw']}; TTFT over "
        f"device-only: {s['ttft_ratio_vs_device_only']}; perplexity: {s['perplexity']}; "
        f"wrote {args.out}/results.json"
    )
    return _done(args, s, [line])


def cmd_jupiter(args: argparse.Namespace) -> int:
    from coinfer.bench.jupiter import JupiterBenchConfig, run_jupiter_bench

    config = JupiterBenchConfig(
        out=args.out,
        model=args.model,
        quick=args.quick,
        max_tokens=args.max_tokens,
        build_peers=args.build_peers,
        repeats=args.repeats,
    )
    s = run_jupiter_bench(config, log=err)["summary"]
    line = (
        f"Jupiter prefill on 2 devices: {s['prefill_speedup_vs_plain']}x the plain pipeline, "
        f"{s['prefill_speedup_vs_single']}x one device (prompts >= 512 tokens); planner gap "
        f"{s['planner_gap_vs_exhaustive']}; outputs identical: {s['outputs_identical']}; "
        f"wrote {args.out}/results.json"
    )
    return _done(args, s, [line])


def cmd_jupiter_decode(args: argparse.Namespace) -> int:
    from coinfer.bench.jupiter_decode import DecodeBenchConfig, rejudge, run_decode_bench

    judge = None if args.judge == "none" else args.judge
    if args.rejudge:
        if judge is None:
            raise ConfigError("--rejudge needs a judge", hint="drop --judge none")
        report = rejudge(args.out, judge, log=err)
    else:
        config = DecodeBenchConfig(
            out=args.out,
            model=args.model,
            heads=args.heads,
            max_tokens=args.max_tokens,
            quick=args.quick,
            judge=judge,
        )
        report = run_decode_bench(config, log=err)
    s, router = report["summary"].get("all", {}), report["router"]
    lines = [f"{name}: {v['speedup_vs_naive']}x naive pipelined decoding ({v['tok_s']} tok/s)"
             for name, v in s.items() if isinstance(v, dict)]  # fmt: skip
    lines.append(
        f"router: outline on {router['held_out']['rate']:.0%} of held-out list questions, "
        f"falls back on {1 - router['humaneval']['rate']:.0%} of HumanEval; wrote {args.out}/results.json"
    )
    if "judge" in report:
        j = report["judge"]["all"]
        lines.append(
            f"judge ({report['judge']['model']}): outline no worse than naive on {j['no_worse']:.0%} of "
            f"{j['pairs']} pairs ({j['no_worse_strict']:.0%} counting only consistent verdicts)"
        )
    return _done(args, {k: report[k] for k in ("summary", "judge") if k in report}, lines)


def _add_jupiter(bench: Any) -> None:
    p = bench.add_parser(
        "jupiter", help="one model on two edge devices: planned pipeline vs plain and one device"
    )
    p.add_argument("--out", default="bench-results/jupiter")
    p.add_argument("--model", "-m", default="qwen2.5-coder-0.5b")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--quick", action="store_true", help="prompts of 512 tokens only")
    p.add_argument("--repeats", type=int, default=3, help="runs per prompt and system; TTFT is their median")
    p.add_argument(
        "--build-peers",
        action="store_true",
        help="build llama.cpp's RPC peer first if missing (about 10 minutes)",
    )
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_jupiter)
    p = bench.add_parser(
        "jupiter-decode", help="Jupiter's decoding ablation: naive, +OP, +SD, +SD+OP on two devices"
    )
    p.add_argument("--out", default="bench-results/jupiter-decode")
    p.add_argument("--model", "-m", default="qwen2.5-coder-0.5b")
    p.add_argument("--heads", default=None, help="draft heads' folder: adds +SD and +SD+OP")
    p.add_argument("--max-tokens", type=int, default=192)
    p.add_argument("--quick", action="store_true", help="four questions")
    p.add_argument(
        "--judge", default="qwen2.5-coder-1.5b",
        help="the model judging outline answers against naive ones (MT-Bench pair-v2); none: skip",
    )  # fmt: skip
    p.add_argument("--rejudge", action="store_true", help="judge the answers in --out again; no decoding")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_jupiter_decode)


def _add_dragon(bench: Any) -> None:
    p = bench.add_parser("dragon", help="device and cloud RAG together under injected network latency")
    p.add_argument("--out", default="bench-results/dragon")
    p.add_argument("--model", "-m", default=DEFAULT_MODEL, help="on both sides (default: %(default)s)")
    p.add_argument(
        "--device-model",
        default=None,
        help="a smaller model on the device (same vocabulary; default: --model)",
    )
    p.add_argument("--max-tokens", type=int, default=48)
    p.add_argument(
        "--delays-ms", type=float, nargs="*", default=[0, 50, 100, 200, 300], help="added round-trip times"
    )
    p.add_argument("--questions", default=None, help="a JSONL file of questions (default: the built-in set)")
    p.add_argument("--limit", type=int, default=None, help="the first N questions")
    p.add_argument("--workloads", nargs="+", default=["qa", "lm"], choices=["qa", "lm"], help="default: both")
    p.add_argument(
        "--bandwidth-mbit",
        type=float,
        default=None,
        help="shape the link with tbf on a veth pair into a network namespace (root; default: loopback)",
    )
    p.add_argument(
        "--systems",
        nargs="+",
        default=None,
        help="question answering's systems (default: all; see the bench's README)",
    )
    p.add_argument("--lm-windows", type=int, default=12, help="language-modelling windows (default: 12)")
    p.add_argument("--lm-window", type=int, default=256, help="tokens per window (default: 256)")
    p.add_argument(
        "--quick", action="store_true", help="SmolLM2, 16 tokens, 0/100/300 ms, two questions, two windows"
    )
    add_output_flags(p)
    p.set_defaults(func=cmd_dragon)


def add_parser(sub: Any) -> None:
    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="suite", required=True)
    p = bench.add_parser("decode", help="tokens/s and forward cost over k tokens, per model and backend")
    p.add_argument("--out", default="bench-results/decode")
    p.add_argument(
        "--models", nargs="*", help="catalogue names (default: all); with --device cuda, architectures"
    )
    p.add_argument("--backends", nargs="*", default=["llama.cpp", "transformers"])
    p.add_argument(
        "--device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="cuda: static caches and CUDA graphs against the bandwidth limit (published architectures, "
        "random weights)",
    )
    p.add_argument("--batches", nargs="*", type=int, default=None, help="with --device cuda: batch sizes")
    p.add_argument("--identity-models", nargs="*", default=None, help="with --device cuda: identity checks")
    p.add_argument("--identity-prompts", type=int, default=None, help="with --device cuda: suite prompts")
    p.add_argument(
        "--transformers-models",
        nargs="*",
        default=None,
        help="limit the transformers backend to these models (it is slow on a CPU)",
    )
    p.add_argument("--ks", nargs="*", type=int, default=None, help="(default: 1 2 4 8 16 32; cuda: to 64)")
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    add_output_flags(p)
    p.set_defaults(func=cmd_decode)

    _add_speculative(bench)

    _add_collective(bench)
    _add_copy_bound(bench)

    _add_llmcad(bench)
    _add_dragon(bench)
    _add_jupiter(bench)
    from coinfer.cli.bench_serve import add_serve_bench

    add_serve_bench(bench)

    p = bench.add_parser("minions", help="local-remote protocols: accuracy against remote tokens and dollars")
    p.add_argument("--out", default="bench-results/minions")
    p.add_argument("--limit", type=int, default=None, help="questions to run (default: all 36)")
    p.add_argument("--protocols", nargs="*", default=None, help="default: all")
    p.add_argument("--questions", nargs="*", default=None, help="question ids to run, e.g. textwrap/0")
    p.add_argument("--chunk-chars", type=int, default=3000, help="MinionS chunk size (default: %(default)s)")
    p.add_argument("--no-concurrency", action="store_true", help="skip measuring concurrent local jobs")
    add_pair_flags(p, price_as="gpt-4o")
    add_output_flags(p)
    p.set_defaults(func=cmd_minions)


def _add_collective(bench: Any) -> None:
    p = bench.add_parser("collective", help="several drafts voting vs plain and single-draft speculation")
    _suite_flags(p, out="bench-results/collective", max_tokens=128)
    p.add_argument("--drafts", default="qwen2.5-coder-0.5b,ngram,smollm2-135m")
    p.add_argument("--batch-sizes", nargs="*", type=int, default=[1, 4, 8])
    _split_flags(p)
    p.add_argument("--no-sweep", action="store_true", help="skip the sweep over fixed speculation lengths")
    p.add_argument(
        "--repeats", type=int, default=1,
        help="runs of every configuration per batch size, taken in turn; the fastest counts, or with "
        "--category-workloads the median of each repeat's ratio to plain (default: 1)",
    )  # fmt: skip
    p.add_argument(
        "--only", nargs="*", default=[], metavar="CONFIG",
        help="run only these configurations beside plain, e.g. single:ngram +majority (default: all)",
    )  # fmt: skip
    p.add_argument(
        "--per-category", type=int, default=None, metavar="N",
        help="prompts per category before the split (default: 8 broad, 4 committed, 2 with --quick)",
    )  # fmt: skip
    p.add_argument(
        "--category-workloads", action="store_true",
        help="run each category's prompts alone, so a category's figure is its own batch's rate",
    )  # fmt: skip
    p.add_argument(
        "--price-rounds", type=int, default=None, metavar="N",
        help="rounds of each batch size's table of forward prices, each timing every shape once (default: 5)",
    )  # fmt: skip
    p.add_argument(
        "--reprice", action="store_true",
        help="run nothing: time the price tables of the finished run in --out again and rewrite its summary",
    )  # fmt: skip
    p.set_defaults(func=cmd_collective)


def _add_copy_bound(bench: Any) -> None:
    from coinfer.bench.broad_suite import BROAD_CATEGORIES

    p = bench.add_parser(
        "copy-bound", help="per category, the speedup no copying drafter passes (perfect, free verification)"
    )
    p.add_argument("--out", default="bench-results/copy-bound")
    p.add_argument("--target", default="qwen2.5-coder-1.5b")
    p.add_argument(
        "--categories", default=",".join(BROAD_CATEGORIES), help="broad suite categories, comma-separated"
    )
    p.add_argument("--per-category", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--split", default="all", choices=["all", "tune", "held-out"], help="default: all")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.set_defaults(func=cmd_copy_bound)


def _add_speculative(bench: Any) -> None:
    p = bench.add_parser("speculative", help="speculative decoding vs plain decoding and peers")
    _suite_flags(p, out="bench-results/speculative", max_tokens=256)
    p.add_argument("--peers", nargs="*", default=None, help="peers to run (default: all available)")
    p.add_argument(
        "--build-peers",
        action="store_true",
        help="build llama.cpp's C++ llama-server for its peers if missing (about 8 minutes)",
    )
    p.add_argument("--threads", type=int, default=None)
    p.add_argument(
        "--heads",
        default=None,
        help="draft heads trained for --target (coinfer edge train-heads): adds 'heads'",
    )
    _split_flags(p)
    p.add_argument(
        "--repeats", type=int, default=1,
        help="runs of each system per prompt, taken in turn; the fastest counts (default: 1)",
    )  # fmt: skip
    p.add_argument(
        "--profile", action="store_true",
        help="run coinfer under cProfile and write the Python overhead per round to OUT/profile.txt",
    )  # fmt: skip
    p.set_defaults(func=cmd_speculative)
