"""``coinfer generate``: one prompt through any engine that continues a prompt, reached by
name through the registry (``--engine``: speculative by default, plain, collective,
llmcad, or one another package registers). Every engine yields the same ``Response``
objects, so streaming, the summary line and ``--json`` are one code path."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from coinfer.cli.common import (
    add_draft_flags,
    add_model_flags,
    add_output_flags,
    add_sampling_flags,
    check_trace_path,
    err,
    prompt_ids,
)
from coinfer.cli.engine_parts import draft_model_name, draft_specs
from coinfer.errors import ConfigError

if TYPE_CHECKING:
    from coinfer.decoding import Response
    from coinfer.decoding.trace import TraceRecorder

__all__ = ["add_parser", "cmd_generate", "draft_model_name", "prompt_ids", "summary_lines"]


def _engine(args: argparse.Namespace) -> Any:
    """``--engine`` from the registry: one that continues a prompt."""
    from coinfer.decoding.registry import get

    engine = get(args.engine)
    if engine.answers:
        raise ConfigError(
            f"--engine {engine.name} answers questions about documents; coinfer generate continues a prompt",
            hint="run it with its own command (see coinfer --help), or coinfer serve --engine " + engine.name,
        )
    return engine


def cmd_generate(args: argparse.Namespace) -> int:
    from coinfer.cli.engine_parts import PartsFromArgs, engine_config
    from coinfer.decoding.engine import Request
    from coinfer.decoding.trace import recorded, save_trace

    engine = _engine(args)
    config = engine_config(engine, args)  # checked before any model loads
    check_trace_path(args.trace)
    parts = PartsFromArgs(args, serving=False, quiet=args.json)
    try:
        session = engine.open(parts.build(engine, skip=("chat",)), config)
        target = session.model
        prompt, prompt_format = prompt_ids(target, args)
        recorder = _recorder(args, session)
        responses = recorded(session.stream(Request(prompt=prompt)), recorder)
        tokens, last, code = _follow(responses, echo=not args.json)
        if recorder is not None:
            save_trace(recorder.finish(), args.trace)
        text = target.detokenize(tokens)
        session.close()
    finally:
        parts.close()
    finish = "interrupted" if code else ((last.finish_reason if last else None) or "length")
    if args.json:
        out = _json(args, text, tokens, finish, prompt_format, last)
        out |= (
            {"drafts": draft_specs(args)}
            if "drafts" in engine.parts
            else {"draft": session.draft_label or "none"}
        )
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        for line in summary_lines(last, finish, drafted=session.draft_label is not None):
            err(line)
    return code


def _recorder(args: argparse.Namespace, session: Any) -> TraceRecorder | None:
    """``--trace``'s recorder: the target's tokens cut by where they came from."""
    if args.trace is None:
        return None
    from coinfer.decoding.trace import TraceRecorder

    target = session.model
    return TraceRecorder(
        session.engine.name, model=target.name, draft=session.draft_label, prompt=args.prompt,
        detokenize=target.detokenize,
    )  # fmt: skip


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
    from coinfer.decoding.registry import names

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
        choices=names(),
        help="an engine from the registry that continues a prompt: speculative (default), plain; "
        "collective: several drafts (--drafts) vote on each draft (paper 001); llmcad: the "
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
