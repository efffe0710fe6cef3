"""``coinfer generate --engine collective``: several drafts vote, one target verifies
(paper 001). Flags to ``engines.collective``; nothing else."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from coinfer.cli import DEFAULT_MODEL, _err, _load, _prompt_ids
from coinfer.models.base import SteerableModel


def generate_collective(args: argparse.Namespace) -> int:
    from coinfer.decoding import SamplingParams
    from coinfer.engines.collective.engine import CollectiveConfig, collective_generate
    from coinfer.engines.collective.gate import GateConfig
    from coinfer.engines.collective.selector import LengthSelectorConfig
    from coinfer.engines.collective.sources import open_sources
    from coinfer.models import load_model

    target = _load(args, quiet=args.json)
    prompt, prompt_format = _prompt_ids(target, args)
    specs = [s.strip() for s in args.drafts.split(",") if s.strip()]

    def load(spec: str) -> SteerableModel:
        if not args.json:
            _err(f"loading the draft {spec}…")
        return load_model(
            spec, backend=args.backend, n_ctx=args.ctx, n_threads=args.threads, device=args.device
        )

    def draft_prompts(model: SteerableModel) -> list[list[int]]:
        return [_prompt_ids(model, args, quiet=True)[0]]

    sources = open_sources(
        specs, target, load=load, draft_prompts=draft_prompts, target_prompt_lens=[len(prompt)]
    )
    sampling = SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed
    )
    draft_tokens = LengthSelectorConfig() if args.draft_tokens == "auto" else args.draft_tokens
    gate = GateConfig()
    config = CollectiveConfig(
        max_tokens=args.max_tokens,
        sampling=sampling,
        draft_tokens=draft_tokens,
        pipeline=args.pipeline,
        gate=None if args.every_draft else gate,
    )
    try:
        run = collective_generate(target, sources, [prompt], config)
    finally:
        for src in sources:
            src.close()
            model = getattr(src, "model", None)
            if model is not None:
                model.close()
        target.close()
    result = run.results[0]
    acceptance = {k: None if v is None else round(v, 3) for k, v in run.acceptance().items()}
    stats = {
        "tokens_per_s": round(run.tokens_per_s, 2),
        "wall_s": round(run.wall_s, 3),
        "mean_accepted_length": round(result.mean_accepted_length, 3),
        "acceptance_rate": round(result.acceptance_rate, 3),
        "target_forwards": run.verifications + 1,
        "drafted": result.drafted,
        "accepted": result.accepted,
        "acceptance_by_draft": acceptance,
        "weights": dict(zip(run.sources, (round(w, 3) for w in run.weights), strict=False)),
        "s_history": run.s_history,
        "rounds": run.verifications,
        "rounds_drafting": dict(zip(run.sources, run.rounds_on, strict=False)),
        "rounds_exploring": dict(zip(run.sources, run.rounds_explored, strict=False)),
        "predrafts_used": run.predrafts_used,
    }
    if args.json:
        out = {
            "text": result.text,
            "n_tokens": len(result.tokens),
            "finish_reason": result.finish_reason,
            "model": args.model,
            "engine": "collective",
            "drafts": specs,
            "prompt_format": prompt_format,
            "stats": stats,
        }
        print(json.dumps(out, ensure_ascii=False))
        return 0
    sys.stdout.write(result.text + "\n")
    by_draft = ", ".join(f"{k} {'–' if v is None else f'{100 * v:.0f}%'}" for k, v in acceptance.items())
    _err(
        f"[{len(result.tokens)} tokens, {run.tokens_per_s:.1f} tok/s, mean accepted length "
        f"{result.mean_accepted_length:.2f}, acceptance {by_draft}, {result.finish_reason}]"
    )
    idle = [name for name, on in zip(run.sources, run.rounds_on, strict=False) if not on]
    if idle and run.verifications:
        _err(
            f"[left out: {', '.join(idle)} (not shown to pay for itself here, or not measurable "
            f"within {gate.explore_share:.0%} of this run); --every-draft makes every draft draft "
            "every round]"
        )
    return 0


def cmd_bench_collective(args: argparse.Namespace) -> int:
    from coinfer.bench.collective import CollectiveBenchConfig, run_collective_bench

    config = CollectiveBenchConfig(
        out=args.out,
        target=args.target,
        drafts=tuple(d.strip() for d in args.drafts.split(",") if d.strip()),
        batch_sizes=tuple(args.batch_sizes),
        max_tokens=args.max_tokens,
        quick=args.quick,
        prompts=args.prompts,
    )
    report = run_collective_bench(config, log=_err)
    for batch, ratios in report["summary"]["throughput_ratio_vs_plain"].items():
        _err(f"batch {batch}: " + ", ".join(f"{name} {r}x" for name, r in ratios.items()))
    _err(f"wrote {args.out}/results.json")
    return 0


def add_bench_parser(bench: Any) -> None:
    p = bench.add_parser("collective", help="several drafts voting vs plain and single-draft speculation")
    p.add_argument("--out", default="bench-results/collective")
    p.add_argument("--target", default=DEFAULT_MODEL)
    p.add_argument("--drafts", default="qwen2.5-coder-0.5b,ngram,smollm2-135m")
    p.add_argument("--batch-sizes", nargs="*", type=int, default=[1, 4, 8])
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--quick", action="store_true", help="2 prompts per category")
    p.add_argument("--prompts", default=None, help='JSON lines {"id", "category", "messages"}')
    p.set_defaults(func=cmd_bench_collective)
