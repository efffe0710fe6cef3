"""The ``coinfer`` command: flags become config objects and calls; nothing else lives here."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coinfer import __version__, catalog
from coinfer.errors import CoinferError

if TYPE_CHECKING:  # the models package is imported lazily: `coinfer models list` stays fast
    from coinfer.models import SteerableModel

DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# ---- models ---------------------------------------------------------------------------


def _model_row(model: catalog.CatalogModel) -> dict[str, Any]:
    path = catalog.prepared_path(model)
    return {
        "name": model.name,
        "path": str(path) if path else None,
        "params": model.params,
        "vocab_size": model.vocab_size,
        "backend": model.backend,
        "arch": model.arch,
        "description": model.description,
        "sha256": model.sha256,
        "installed": catalog.parts_installed(model),
    }


def cmd_models_list(args: argparse.Namespace) -> int:
    rows = [_model_row(m) for m in catalog.CATALOG.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<20} {'params':>6} {'vocab':>7}  {'state':<10} path")
    for r in rows:
        state = "prepared" if r["path"] else ("installed" if r["installed"] else "missing")
        print(f"{r['name']:<20} {r['params']:>6} {r['vocab_size']:>7}  {state:<10} {r['path'] or '-'}")
    print(f"\ncache: {catalog.cache_dir() / 'models'}  (coinfer models prepare NAME)")
    return 0


@contextmanager
def _byte_progress(desc: str, *, enabled: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on stderr fed with (bytes done, bytes total), or None when disabled."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=0, unit="B", unit_scale=True, desc=desc, file=sys.stderr, leave=False) as bar:

        def update(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        yield update


def prepare_with_progress(name: str, *, force: bool = False, quiet: bool = False) -> str:
    path = catalog.prepared_path(catalog.get(name))
    if path and not force:
        return str(path)
    with _byte_progress(f"assembling {name}", enabled=not quiet) as progress:
        return str(catalog.prepare(name, force=force, progress=progress))


def cmd_models_prepare(args: argparse.Namespace) -> int:
    names = args.names or list(catalog.CATALOG)
    for name in names:
        path = prepare_with_progress(name, force=args.force, quiet=args.json)
        if not args.json:
            print(f"{name}: {path}")
    if args.json:
        print(json.dumps([_model_row(catalog.get(n)) for n in names], indent=2))
    return 0


def cmd_models_info(args: argparse.Namespace) -> int:
    model = catalog.get(args.name)
    row = _model_row(model)
    row["packages"] = model.dists
    if args.verify and row["path"]:
        row["sha256_ok"] = catalog.sha256_file(Path(row["path"])) == model.sha256
    if args.json:
        print(json.dumps(row, indent=2))
        return 0
    for key, value in row.items():
        if key == "packages":
            value = f"{len(value)} ({value[0]} …)" if len(value) > 1 else value[0]
        print(f"{key:>12}: {value}")
    return 0


# ---- generate -------------------------------------------------------------------------


def _load(args: argparse.Namespace, quiet: bool) -> SteerableModel:
    from coinfer.models import load_model, resolve

    source = resolve(args.model)
    if source.kind == "catalog":
        prepare_with_progress(args.model, quiet=quiet)
    if not quiet:
        _err(f"loading {args.model} on {args.backend}…")
    return load_model(
        args.model, backend=args.backend, n_ctx=args.ctx, n_threads=args.threads, device=args.device
    )


def _prompt_ids(
    model: SteerableModel, args: argparse.Namespace, quiet: bool = False
) -> tuple[list[int], str]:
    """The prompt's ids and its format: "chat" (the model's template) or "raw"."""
    if not args.raw and not model.template.source and not quiet:
        _err(f"note: {model.name} has no chat template; sending the prompt as plain text")
    if args.raw or not model.template.source:
        return list(model.text_prompt(args.prompt)), "raw"
    messages = ([{"role": "system", "content": args.system}] if args.system else []) + [
        {"role": "user", "content": args.prompt}
    ]
    return list(model.chat_prompt(messages)), "chat"


def _summary(stats: Any, finish: str, spec: Any = None) -> str:
    drafting = ""
    if spec:
        drafting = f", mean accepted length {spec.mean_accepted_length:.2f}"
        drafting += f", acceptance {100 * spec.acceptance_rate:.0f}%"
    return (
        f"[{stats.n_tokens} tokens, {stats.tokens_per_s:.1f} tok/s "
        f"(decode {stats.decode_tokens_per_s:.1f} tok/s), ttft {stats.ttft_s:.2f}s, "
        f"prompt {stats.prompt_tokens} tokens{drafting}, {finish}]"
    )


def _drafter(args: argparse.Namespace, target: SteerableModel, prompt: list[int]) -> Any:
    """None, the n-gram drafter, or a draft model (bridged through text if its vocabulary differs)."""
    from coinfer.decoding import ModelDrafter, NgramDrafter, TextDrafter
    from coinfer.decoding.drafters import check_same_vocabulary
    from coinfer.models import load_model

    if args.draft == "none":
        return None
    if args.draft == "ngram":
        return NgramDrafter()
    draft = load_model(
        args.draft, backend=args.backend, n_ctx=args.ctx, n_threads=args.threads, device=args.device
    )
    try:
        check_same_vocabulary(draft, target)
    except CoinferError:
        if not args.json:
            _err(f"note: {draft.name} tokenizes differently from {target.name}: drafting through text")
        draft_prompt, _ = _prompt_ids(draft, args, quiet=True)
        return TextDrafter(draft, target, draft_prompt=draft_prompt, target_prompt_len=len(prompt))
    return ModelDrafter(draft, target=target)


def _stream(args: argparse.Namespace, model: SteerableModel, drafter: Any, prompt: list[int]) -> Any:
    from coinfer.decoding import SamplingParams, SpecConfig, stream_generate, stream_speculative
    from coinfer.decoding.draft_length import AdaptiveDraftLength

    sampling = SamplingParams(
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed
    )
    if drafter is None:
        return stream_generate(model, prompt, max_tokens=args.max_tokens, sampling=sampling)
    draft_tokens = AdaptiveDraftLength() if args.draft_tokens == "auto" else args.draft_tokens
    config = SpecConfig(max_tokens=args.max_tokens, sampling=sampling, draft_tokens=draft_tokens)
    return stream_speculative(model, drafter, prompt, config)


def cmd_generate(args: argparse.Namespace) -> int:
    from coinfer.decoding import GenerationStats

    if args.engine == "collective":
        from coinfer.cli_collective import generate_collective

        return generate_collective(args)

    if args.draft == "auto":  # the drafter that measured best here (README, docs/bench/speculative)
        args.draft = "ngram"
    model = _load(args, quiet=args.json)
    prompt, prompt_format = _prompt_ids(model, args)
    drafter = _drafter(args, model, prompt)
    stream = _stream(args, model, drafter, prompt)
    stats, spec, tokens, finish, code = GenerationStats(prompt_tokens=len(prompt)), None, [], "length", 0
    try:
        for r in stream:
            stats, spec, tokens = r.stats, r.spec, r.tokens
            if not args.json:
                sys.stdout.write(r.text)
                sys.stdout.flush()
            finish = r.finish_reason or finish
    except KeyboardInterrupt:
        stream.close()  # runs the generator's cleanup: the sequence is released
        finish, code = "interrupted", 130
    text = model.detokenize(tokens)
    if drafter is not None and hasattr(drafter, "close"):
        drafter.close()
        drafter.model.close()
    model.close()
    if args.json:
        out = {
            "text": text,
            "n_tokens": len(tokens),
            "finish_reason": finish,
            "model": args.model,
            "backend": args.backend,
            "draft": args.draft,
            "prompt_format": prompt_format,
            "stats": {**stats.as_dict(), **(spec.as_dict() if spec else {})},
        }
        print(json.dumps(out, ensure_ascii=False))
    else:
        sys.stdout.write("\n")
        _err(_summary(stats, finish, spec))
    return code


# ---- bench ----------------------------------------------------------------------------


def cmd_bench_decode(args: argparse.Namespace) -> int:
    from coinfer.bench.decode import DecodeBenchConfig, run_decode_bench

    config = DecodeBenchConfig(
        out=args.out,
        models=tuple(args.models or catalog.CATALOG),
        backends=tuple(args.backends),
        ks=tuple(args.ks),
        decode_tokens=args.decode_tokens,
        repeats=args.repeats,
        n_threads=args.threads,
        transformers_models=tuple(args.transformers_models) if args.transformers_models else None,
    )
    report = run_decode_bench(config, log=_err)
    _err(f"wrote {report['files']['json']} and {report['files']['markdown']}")
    return 0


def cmd_bench_speculative(args: argparse.Namespace) -> int:
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
    )
    report = run_speculative_bench(config, log=_err)
    s = report["summary"]
    _err(
        f"coinfer: geomean {s['geomean_speedup']}x, min {s['min_speedup']}x, per category "
        f"{s['per_category']}, identical {s['identical_outputs']}/{s['total_prompts']}; "
        f"wrote {args.out}/results.json"
    )
    return 0


# ---- parser ---------------------------------------------------------------------------


def _draft_tokens(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'auto', got {value!r}") from None
    if k < 0:
        raise argparse.ArgumentTypeError(f"expected k >= 0, got {k}")
    return k


def _add_model_flags(p: argparse.ArgumentParser, default_model: str | None = DEFAULT_MODEL) -> None:
    p.add_argument(
        "--model",
        "-m",
        default=default_model,
        help="catalogue name, .gguf file, model directory or Hub id (default: %(default)s)",
    )
    p.add_argument("--backend", "-b", default="llama.cpp", choices=["llama.cpp", "transformers"])
    p.add_argument("--ctx", type=int, default=4096, help="context window in tokens")
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--device", default=None, help="transformers device: cpu or cuda (default: auto)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="coinfer",
        description="Collaborative inference between small and large language models.",
    )
    parser.add_argument("--version", action="version", version=f"coinfer {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    models = sub.add_parser("models", help="the model catalogue").add_subparsers(dest="action", required=True)
    p = models.add_parser("list", help="list catalogue models")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models_list)
    p = models.add_parser("prepare", help="assemble and verify models (all by default)")
    p.add_argument("names", nargs="*", help="catalogue names (default: all)")
    p.add_argument("--force", action="store_true", help="assemble again even if a file exists")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models_prepare)
    p = models.add_parser("info", help="details of one model")
    p.add_argument("name")
    p.add_argument("--verify", action="store_true", help="re-hash the assembled file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models_info)

    p = sub.add_parser("generate", help="generate text from a prompt")
    p.add_argument("prompt")
    _add_model_flags(p)
    p.add_argument("--max-tokens", "-n", type=int, default=256)
    p.add_argument("--temperature", "-t", type=float, default=0.0, help="0 is greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--system", default=None, help="a system message for the chat template")
    p.add_argument("--raw", action="store_true", help="send the prompt as plain text, no chat template")
    p.add_argument("--json", action="store_true", help="print one JSON object at the end")
    p.add_argument(
        "--draft",
        default="auto",
        help="speculative drafter: auto (default: the best measured, today ngram), none, ngram "
        "(prompt lookup), or a draft model, e.g. qwen2.5-coder-0.5b (another vocabulary drafts "
        "through text)",
    )
    p.add_argument(
        "--draft-tokens",
        type=_draft_tokens,
        default="auto",
        help="tokens drafted per round: K, or auto (default: chosen online from the measured "
        "verification cost and acceptance, 0 when drafting does not pay)",
    )
    p.add_argument(
        "--engine",
        default="speculative",
        choices=["speculative", "collective"],
        help="collective: several drafts (--drafts) vote on each draft (paper 001)",
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

    bench = sub.add_parser("bench", help="benchmarks").add_subparsers(dest="suite", required=True)
    p = bench.add_parser("decode", help="tokens/s and forward cost over k tokens, per model and backend")
    p.add_argument("--out", default="bench-results/decode")
    p.add_argument("--models", nargs="*", help="catalogue names (default: all)")
    p.add_argument("--backends", nargs="*", default=["llama.cpp", "transformers"])
    p.add_argument(
        "--transformers-models",
        nargs="*",
        default=None,
        help="limit the transformers backend to these models (it is slow on a CPU)",
    )
    p.add_argument("--ks", nargs="*", type=int, default=[1, 2, 4, 8, 16, 32])
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.set_defaults(func=cmd_bench_decode)
    p = bench.add_parser("speculative", help="speculative decoding vs plain decoding and peers")
    p.add_argument("--out", default="bench-results/speculative")
    p.add_argument("--target", default=DEFAULT_MODEL)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--quick", action="store_true", help="2 prompts per category")
    p.add_argument("--prompts", default=None, help='JSON lines {"id", "category", "messages"}')
    p.add_argument("--peers", nargs="*", default=None, help="peers to run (default: all available)")
    p.add_argument(
        "--build-peers",
        action="store_true",
        help="build llama.cpp's C++ llama-server for its peers if missing (about 8 minutes)",
    )
    p.add_argument("--threads", type=int, default=None)
    p.set_defaults(func=cmd_bench_speculative)
    from coinfer import cli_collective, cli_minions  # here, once this module is loaded: they import it

    cli_minions.add_parsers(sub, bench)
    cli_collective.add_bench_parser(bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if in_main else None  # stops our servers too
    try:
        return int(args.func(args) or 0)
    except CoinferError as exc:
        first, _, _ = str(exc.args[0] if exc.args else exc).partition("\n")
        _err(f"coinfer: error: {first}")
        if exc.hint:
            _err(f"hint: {exc.hint}")
        return 2
    except KeyboardInterrupt:
        _err("coinfer: interrupted")
        return 130
    finally:
        if in_main:
            signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: object) -> None:
    """SIGTERM unwinds like Ctrl-C: every ``finally`` runs, child servers included."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
