"""``coinfer generate``: one prompt through the speculative engine (one drafter, or plain
decoding), the collective engine (several drafts vote) or LLMCad (a draft model's token
trees, verified when its confidence runs low). All yield the same ``Response`` objects,
so streaming, the summary line and ``--json`` are one code path."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from coinfer import catalog
from coinfer.cli.common import (
    add_draft_flags,
    add_model_flags,
    add_output_flags,
    add_sampling_flags,
    check_trace_path,
    err,
    load_from_args,
    sampling_from_args,
)
from coinfer.errors import ConfigError

if TYPE_CHECKING:
    from coinfer.decoding import Drafter, Response
    from coinfer.decoding.trace import TraceRecorder
    from coinfer.models import SteerableModel
    from coinfer.models.base import Prompter

__all__ = ["add_parser", "cmd_generate", "draft_model_name", "prompt_ids", "summary_lines"]


def _config(args: argparse.Namespace) -> Any:
    """The engine's config from the flags, made (and so checked) before any model loads."""
    sampling = sampling_from_args(args)
    if args.engine == "collective":
        from coinfer.engines.collective import CollectiveConfig, GateConfig

        if not _draft_specs(args):
            raise ConfigError("--drafts names no drafter", hint="pass --drafts ngram,qwen2.5-coder-0.5b")
        return CollectiveConfig(
            max_tokens=args.max_tokens,
            sampling=sampling,
            draft_tokens=args.draft_tokens,
            pipeline=args.pipeline,
            gate=None if args.every_draft else GateConfig(),
        )
    if args.engine == "llmcad":
        from coinfer.engines.llmcad import LLMCadConfig

        return LLMCadConfig(
            max_tokens=args.max_tokens,
            sampling=sampling,
            draft_tokens=args.draft_tokens,
            alpha=args.alpha,
            speculative=not args.no_speculation,
            memory_budget=args.memory_budget,
        )
    from coinfer.decoding import SpecConfig

    return SpecConfig(max_tokens=args.max_tokens, sampling=sampling, draft_tokens=args.draft_tokens)


def _draft_specs(args: argparse.Namespace) -> list[str]:
    return [s.strip() for s in args.drafts.split(",") if s.strip()]


def prompt_ids(model: Prompter, args: argparse.Namespace, *, quiet: bool = False) -> tuple[list[int], str]:
    """The prompt's ids and its format: "chat" (the model's template) or "raw"."""
    if args.raw or not model.template.source:
        if not args.raw and not quiet:
            err(f"note: {model.name} has no chat template; sending the prompt as plain text")
        return model.text_prompt(args.prompt), "raw"
    return model.user_prompt(args.prompt, system=args.system), "chat"


def _loading(args: argparse.Namespace, role: str) -> dict[str, Any]:
    """How a model loads: under ``--memory-budget`` (llama.cpp; ``budget_load_options``),
    and a target that draft heads read keeps its hidden states."""
    options: dict[str, Any] = {}
    if role == "target" and _heads_draft(args):
        options["hidden_states"] = True
    if args.memory_budget is None or args.backend != "llama.cpp":
        return options
    from coinfer.models.load import budget_load_options

    return options | budget_load_options(role)


def _heads_draft(args: argparse.Namespace) -> bool:
    """Whether the flags draft with the target's own heads (``--draft heads:DIR``)."""
    specs = _draft_specs(args) if args.engine == "collective" else [str(args.draft)]
    if not any(s.startswith("heads:") for s in specs):
        return False
    if args.engine != "speculative" or args.backend != "llama.cpp":
        raise ConfigError(
            "draft heads draft on the speculative engine with a llama.cpp target",
            hint="drop --engine and --backend, or draft with ngram or a draft model",
        )
    return True


def draft_model_name(args: argparse.Namespace) -> str:
    """LLMCad's resident draft: ``--draft`` names a model; ``auto`` is the catalogue's draft
    for the target."""
    if args.draft in ("none", "ngram"):
        raise ConfigError(
            f"--engine llmcad needs a draft model, not --draft {args.draft}",
            hint="pass --draft qwen2.5-coder-0.5b (a smaller model of the target's vocabulary)",
        )
    if args.draft != "auto":
        return str(args.draft)
    entry = catalog.CATALOG.get(args.model)
    if entry is None or entry.draft is None:
        raise ConfigError(
            f"no default draft model for {args.model}",
            hint="pass --draft MODEL: a smaller model of the same vocabulary",
        )
    return entry.draft


def _drafters(args: argparse.Namespace, target: SteerableModel, prompt: list[int]) -> list[Drafter]:
    """The drafters the flags name (none for ``--draft none``), each model loaded like the target."""
    from coinfer.decoding import TextDrafter, open_drafter

    specs = _draft_specs(args) if args.engine == "collective" else [args.draft]
    drafters = []
    for spec in (s for s in specs if s != "none"):
        drafter = open_drafter(
            spec,
            target,
            load=lambda name: load_from_args(args, name, quiet=args.json, **_loading(args, "draft")),
            draft_prompts=lambda model: [prompt_ids(model, args, quiet=True)[0]],
            target_prompt_lens=[len(prompt)],
        )
        if isinstance(drafter, TextDrafter) and not args.json:
            err(f"note: {drafter.name} tokenizes differently from {target.name}: drafting through text")
        drafters.append(drafter)
    return drafters


def _stream(
    args: argparse.Namespace,
    config: Any,
    target: SteerableModel,
    prompt: list[int],
    drafters: list[Drafter],
    draft_model: SteerableModel | None,
) -> Generator[Response, None, None]:
    if draft_model is not None:
        from coinfer.engines import llmcad

        return llmcad.stream(target, prompt, draft=draft_model, config=config)
    if args.engine == "collective":
        from coinfer.engines import collective

        return collective.stream(target, [prompt], drafts=drafters, config=config)
    from coinfer.decoding import stream

    return stream(target, prompt, draft=drafters[0] if drafters else None, config=config)


def cmd_generate(args: argparse.Namespace) -> int:
    from coinfer.decoding.trace import recorded, save_trace

    config = _config(args)
    check_trace_path(args.trace)
    draft_name = draft_model_name(args) if args.engine == "llmcad" else None
    target = load_from_args(args, quiet=args.json, **_loading(args, "target"))
    drafters: list[Drafter] = []
    draft_model = None
    try:
        prompt, prompt_format = prompt_ids(target, args)
        if draft_name is not None:
            draft_model = load_from_args(args, draft_name, quiet=args.json, **_loading(args, "draft"))
        else:
            drafters = _drafters(args, target, prompt)
        responses = _stream(args, config, target, prompt, drafters, draft_model)
        recorder = _recorder(args, target, drafters, draft_model)
        tokens, last, code = _follow(recorded(responses, recorder), echo=not args.json)
        if recorder is not None:
            save_trace(recorder.finish(), args.trace)
        text = target.detokenize(tokens)
    finally:
        for d in drafters:
            d.close()
            if d.model is not None:
                d.model.close()
        if draft_model is not None:
            draft_model.close()
        target.close()
    finish = "interrupted" if code else ((last.finish_reason if last else None) or "length")
    if args.json:
        draft = draft_model.name if draft_model is not None else (drafters[0].name if drafters else "none")
        print(json.dumps(_json(args, text, tokens, finish, prompt_format, last, draft), ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        for line in summary_lines(last, finish, drafted=bool(drafters) or draft_model is not None):
            err(line)
    return code


def _recorder(
    args: argparse.Namespace, target: SteerableModel, drafters: list[Drafter], draft_model: Any
) -> TraceRecorder | None:
    """``--trace``'s recorder: the target's tokens cut by where they came from."""
    if args.trace is None:
        return None
    from coinfer.decoding.trace import TraceRecorder

    draft = draft_model.name if draft_model is not None else ",".join(d.name for d in drafters) or None
    return TraceRecorder(args.engine, model=target.name, draft=draft, prompt=args.prompt,
                         detokenize=target.detokenize)  # fmt: skip


def _follow(
    responses: Generator[Response, None, None], *, echo: bool
) -> tuple[list[int], Response | None, int]:
    """Stream the text to stdout (if ``echo``); every token, the last response, and the exit
    code (130 on Ctrl-C, which keeps what was generated)."""
    tokens: list[int] = []
    last = None
    try:
        for last in responses:
            tokens += last.tokens
            if echo:
                sys.stdout.write(last.text)
                sys.stdout.flush()
    except KeyboardInterrupt:
        responses.close()  # the engine's cleanup runs: sequences released
        return tokens, last, 130
    return tokens, last, 0


def _json(
    args: argparse.Namespace,
    text: str,
    tokens: list[int],
    finish: str,
    prompt_format: str,
    last: Response | None,
    draft: str,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "text": text,
        "n_tokens": len(tokens),
        "finish_reason": finish,
        "model": args.model,
        "backend": args.backend,
        "engine": args.engine,
        "prompt_format": prompt_format,
    }
    if args.engine == "collective":
        out["drafts"] = _draft_specs(args)
    else:
        out["draft"] = draft
    out["stats"] = last.stats.as_dict() if last else {}
    out["extras"] = last.extras if last else {}
    return out


def summary_lines(last: Response | None, finish: str, *, drafted: bool) -> list[str]:
    """The summary line (and, for the collective engine, the drafts it left out)."""
    if last is None:
        return [f"[no tokens, {finish}]"]
    s, extras = last.stats, last.extras
    line = (
        f"[{s.n_tokens} tokens, {s.tokens_per_s:.1f} tok/s (decode {s.decode_tokens_per_s:.1f} tok/s), "
        f"ttft {s.ttft_s:.2f}s, prompt {s.prompt_tokens} tokens"
    )
    if drafted:
        line += (
            f", mean accepted length {s.mean_accepted_length:.2f}, acceptance {100 * s.acceptance_rate:.0f}%"
        )
    by_draft = extras.get("acceptance_by_draft")
    if by_draft:
        line += ", by draft " + ", ".join(
            f"{k} {'–' if v is None else f'{100 * v:.0f}%'}" for k, v in by_draft.items()
        )
    if "tree_sizes" in extras and extras["tree_sizes"]:
        sizes = extras["tree_sizes"]
        line += f", {len(sizes)} verifications of trees of {sum(sizes) / len(sizes):.1f} tokens on average"
    piped = extras.get("pipelined_rounds")
    if piped is not None:
        line += f", pipelined {piped} of {extras.get('verifications', 0)} rounds"
    lines = [f"{line}, {finish}]"]
    idle = [name for name, rounds in extras.get("rounds_drafting", {}).items() if not rounds]
    if idle and extras.get("verifications"):
        lines.append(
            f"[left out: {', '.join(idle)} (not shown to pay for itself here, or not measurable within "
            "a small share of this run); --every-draft makes every draft draft every round]"
        )
    return lines


def _size(text: str) -> int:
    from coinfer.models.prefetch import parse_size

    try:
        return parse_size(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc).splitlines()[0]) from exc


def add_parser(sub: Any) -> None:
    p = sub.add_parser("generate", help="generate text from a prompt")
    p.add_argument("prompt")
    add_model_flags(p)
    p.add_argument("--max-tokens", "-n", type=int, default=256, help="tokens to generate at most")
    add_sampling_flags(p)
    p.add_argument("--system", default=None, help="a system message for the chat template")
    p.add_argument("--raw", action="store_true", help="send the prompt as plain text, no chat template")
    add_output_flags(p, trace=True)
    add_draft_flags(p)
    p.add_argument(
        "--engine",
        default="speculative",
        choices=["speculative", "collective", "llmcad"],
        help="collective: several drafts (--drafts) vote on each draft (paper 001); llmcad: the "
        "--draft model writes token trees, the target verifies them when the draft's confidence "
        "runs low (paper 002)",
    )
    p.add_argument(
        "--alpha",
        type=float,
        default=0.01,
        help="llmcad: the first threshold of tree-cumulative confidence below which the target "
        "verifies; it then adapts (default: %(default)s)",
    )
    p.add_argument(
        "--memory-budget",
        type=_size,
        default=None,
        metavar="SIZE",
        help="memory this run may hold, e.g. 800M (llama.cpp): the target runs from its "
        "memory-mapped file and the draft stays resident; llmcad reads the target's weights "
        "ahead within what the budget leaves. The OS enforces it (a small machine, or the "
        "cgroups of `coinfer bench llmcad`)",
    )
    p.add_argument(
        "--no-speculation",
        action="store_true",
        help="llmcad: the draft waits while the target verifies (default: it writes on)",
    )
    p.add_argument(
        "--drafts",
        default="qwen2.5-coder-0.5b,ngram",
        help="collective: comma-separated drafts, each ngram or a model (default: %(default)s)",
    )
    p.add_argument(
        "--pipeline", action="store_true", help="collective: draft on another core while the target verifies"
    )
    p.add_argument(
        "--every-draft",
        action="store_true",
        help="collective: every draft drafts every round, also one that costs more than it saves "
        "(default: such a draft only drafts now and then, to measure it)",
    )
    p.set_defaults(func=cmd_generate)
