"""``coinfer edge train-heads``: self-drafting heads for a model, trained on this CPU by
self-distillation (``models/heads_training.py``).

The work folder ``OUT/work`` keeps the generated answers (JSON lines) and a training
checkpoint, so the same command run again resumes; ``OUT`` receives ``heads.json`` and
``heads.safetensors``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from coinfer.cli.common import err
from coinfer.errors import ConfigError

__all__ = ["add_train_parser", "cmd_train_heads"]


class _Bars:
    """One tqdm bar per stage on stderr (the library reports, the CLI draws)."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bars: dict[str, Any] = {}

    def stage(self, name: str) -> Callable[[str, int, int], None]:
        """A callback that draws under ``name`` whatever stage it is told."""

        def report(_: str, done: int, total: int) -> None:
            self(name, done, total)

        return report

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.quiet:
            return
        from tqdm import tqdm

        bar = self.bars.get(stage)
        if bar is None:
            bar = self.bars[stage] = tqdm(total=total, desc=stage, file=sys.stderr, leave=True)
        bar.update(done - bar.n)
        if done >= total:
            bar.close()


def cmd_train_heads(args: argparse.Namespace) -> int:
    from coinfer.bench.workloads import head_training_prompts
    from coinfer.models.heads import DraftHeads, config_digest
    from coinfer.models.heads_training import (
        TrainConfig,
        corpus_features,
        generate_corpus,
        head_accuracy,
        head_vocabulary,
        train_heads,
    )
    from coinfer.models.load import load_model, transformers_folder

    if args.heads < 1 or args.prompts < 1 or args.held_out < 1 or args.max_tokens < 2:
        raise ConfigError(
            "--heads, --prompts and --held-out must be >= 1, --max-tokens >= 2",
            hint="e.g. --heads 4 --prompts 160 --held-out 40 --max-tokens 192",
        )
    config = TrainConfig(epochs=args.epochs, batch=args.batch, lr=args.lr)
    out, started = Path(args.out), time.time()
    work = out / "work"
    bars = _Bars(args.quiet)
    target = load_model(args.model, backend="transformers")
    writer = target if args.backend == "transformers" else load_model(args.model, backend=args.backend)
    sets = {
        "train": head_training_prompts(held_out=False, limit=args.prompts),
        "held-out": head_training_prompts(held_out=True, limit=args.held_out),
    }
    rows = {
        name: generate_corpus(writer, prompts, work / f"answers-{name}.jsonl", max_tokens=args.max_tokens,
                              progress=bars.stage(f"answers ({name})"))
        for name, prompts in sets.items()
    }  # fmt: skip
    hf = target.model  # type: ignore[attr-defined]  # transformers' module: hidden states, lm_head
    data = {name: corpus_features(hf, r, k=args.heads, progress=bars) for name, r in rows.items()}
    digest = config_digest(transformers_folder(args.model))
    width = int(hf.config.hidden_size)
    heads = DraftHeads.zeros(model=args.model, digest=digest, hidden=width, heads=args.heads)
    checkpoint = work / "checkpoint.safetensors"
    heads = train_heads(heads, hf.lm_head, data["train"], config=config, checkpoint=checkpoint, progress=bars)
    accuracy = head_accuracy(heads, hf.lm_head, data["held-out"])
    trained = {
        "prompts": args.prompts, "held_out": args.held_out, "max_tokens": args.max_tokens,
        "writer": args.backend, "positions": int(len(data["train"].hidden)),
        "held_out_positions": int(len(data["held-out"].hidden)), **config.__dict__,
        "seconds": round(time.time() - started, 1),
    }  # fmt: skip
    heads.meta = replace(heads.meta, accuracy=accuracy, trained=trained)
    heads.vocab = head_vocabulary(data["train"])
    heads.save(out)
    err(
        f"coinfer: heads for {args.model} in {out}; held-out top-1 accuracy per head: "
        + ", ".join(f"{a:.1%}" for a in accuracy)
    )
    return 0


def add_train_parser(edge: Any) -> None:
    p = edge.add_parser("train-heads", help="train self-drafting heads for a model on this CPU")
    p.add_argument("--model", "-m", default="qwen2.5-coder-0.5b", help="catalogue name, .gguf or model dir")
    p.add_argument("--out", required=True, help="folder for heads.json and heads.safetensors")
    p.add_argument("--heads", type=int, default=4, help="draft heads (each guesses one token further)")
    p.add_argument("--prompts", type=int, default=160, help="training prompts (CPython docs, HumanEval)")
    p.add_argument("--held-out", type=int, default=40, help="held-out prompts the accuracy is measured on")
    p.add_argument("--max-tokens", type=int, default=192, help="tokens of each generated answer at most")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=256, help="positions per step")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--backend", "-b", default="llama.cpp", choices=["llama.cpp", "transformers"],
        help="what writes the answers (the features always come from transformers)",
    )  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_train_heads)
