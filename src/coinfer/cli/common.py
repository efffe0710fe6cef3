"""What every subcommand shares: flag groups (model, sampling, draft, output), one way to
load a model from flags, and the one-line error a user mistake gets."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from coinfer import catalog
from coinfer.errors import ConfigError
from coinfer.models.load import DTYPES, check_backend

if TYPE_CHECKING:  # the models package is imported lazily: `coinfer models list` stays fast
    from coinfer.decoding import SamplingParams
    from coinfer.models import SteerableModel
    from coinfer.models.base import Prompter

__all__ = [
    "DEFAULT_MODEL",
    "Parser",
    "add_draft_flags",
    "add_dtype_flag",
    "add_model_flags",
    "add_output_flags",
    "add_pair_flags",
    "add_sampling_flags",
    "check_trace_path",
    "device_budgets",
    "draft_tokens",
    "err",
    "load_from_args",
    "open_chat_from_args",
    "prepare_with_progress",
    "prompt_ids",
    "sampling_from_args",
]

DEFAULT_MODEL = "qwen2.5-coder-1.5b"


def err(text: str) -> None:
    """A line for the user on stderr (stdout carries results)."""
    print(text, file=sys.stderr, flush=True)


class Parser(argparse.ArgumentParser):
    """argparse, with a mistake on the command line reported as one line and a hint."""

    def error(self, message: str) -> NoReturn:
        err(f"coinfer: error: {message}")
        err(f"hint: see {self.prog} --help")
        raise SystemExit(2)


# ---- flag groups ----------------------------------------------------------------------


def add_model_flags(
    p: argparse.ArgumentParser, *, default: str | None = DEFAULT_MODEL, ctx: int = 4096, ctx_help: str = "",
    required: bool | None = None,
) -> None:  # fmt: skip
    """--model/-m (``required``: by default when it has no default), --backend/-b, --ctx,
    --threads, --device, --kv, --dtype."""
    p.add_argument(
        "--model",
        "-m",
        default=default,
        required=default is None if required is None else required,
        help="catalogue name, .gguf file, model directory or Hub id"
        + (" (default: %(default)s)" if default else ""),
    )
    p.add_argument("--backend", "-b", default="llama.cpp", choices=["llama.cpp", "transformers"])
    p.add_argument(
        "--ctx", type=int, default=ctx, help=ctx_help or "context window in tokens (default: %(default)s)"
    )
    p.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    p.add_argument("--device", default=None, help="transformers device: cpu or cuda (default: auto)")
    p.add_argument(
        "--kv",
        default=None,
        choices=["static", "dynamic"],
        help="transformers KV caches: static ones replay each forward as a CUDA graph "
        "(default: static on a GPU)",
    )
    add_dtype_flag(p)


def add_dtype_flag(
    p: argparse.ArgumentParser,
    help: str = "transformers weights and activations (default: float32 on the CPU, bfloat16 on a GPU)",
) -> None:
    p.add_argument("--dtype", default=None, choices=list(DTYPES), help=help)


def add_sampling_flags(p: argparse.ArgumentParser) -> None:
    """--temperature/-t, --top-p, --top-k, --seed: how the target's tokens are drawn."""
    p.add_argument("--temperature", "-t", type=float, default=0.0, help="0 is greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (default: 1, off)")
    p.add_argument(
        "--top-k", type=int, default=0, help="sample among the k likeliest tokens (default: 0, off)"
    )
    p.add_argument("--seed", type=int, default=None, help="the same seed gives the same text")


def draft_tokens(value: str) -> int | str:
    """``--draft-tokens``: a whole number, or ``auto``."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or 'auto', got {value!r}") from None


def add_draft_flags(p: argparse.ArgumentParser) -> None:
    """--draft, --draft-tokens: what drafts and how much."""
    p.add_argument(
        "--draft",
        default="auto",
        help="speculative drafter: auto (default: the best measured, today ngram), none, ngram "
        "(prompt lookup), heads:DIR (the target's own draft heads: coinfer edge train-heads), or a "
        "draft model, e.g. qwen2.5-coder-0.5b (another vocabulary drafts through text)",
    )
    p.add_argument(
        "--draft-tokens",
        type=draft_tokens,
        default="auto",
        help="tokens drafted per round: K, or auto (default: chosen online from the measured "
        "verification cost and acceptance, 0 when drafting does not pay)",
    )


def add_output_flags(p: argparse.ArgumentParser, *, trace: bool = False) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object with the results")
    if trace:
        p.add_argument(
            "--trace", default=None, metavar="FILE",
            help="write what the engine did, step by step, to this JSON file (open it with coinfer view)",
        )  # fmt: skip


def check_trace_path(path: str | None) -> None:
    """Refuse, before any model loads, a ``--trace`` that cannot be written."""
    if path is None:
        return
    folder = Path(path).expanduser().resolve().parent
    if not folder.is_dir():
        raise ConfigError(
            f"cannot write the trace to {path}: {folder} is not a folder",
            hint="pass --trace FILE in an existing folder",
        )


def add_pair_flags(p: argparse.ArgumentParser, *, price_as: str | None) -> None:
    """The local and remote models, how remote tokens are priced, and local parallelism."""
    p.add_argument("--local", default="qwen2.5-coder-0.5b", help="local model (default: %(default)s)")
    p.add_argument(
        "--remote",
        default=DEFAULT_MODEL,
        help="remote model: served here on loopback, or its name at --remote-base-url (default: %(default)s)",
    )
    p.add_argument(
        "--remote-base-url", default=None, help="an OpenAI-compatible API, e.g. https://api.openai.com/v1"
    )
    p.add_argument(
        "--price-as",
        default=price_as,
        help="price remote tokens as this model (default: %(default)s; none: the remote, else gpt-4o)",
    )
    p.add_argument("--parallel", type=int, default=8, help="local jobs decoded together")


def sampling_from_args(args: argparse.Namespace) -> SamplingParams:
    from coinfer.decoding import SamplingParams

    return SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)


def prompt_ids(model: Prompter, args: argparse.Namespace, *, quiet: bool = False) -> tuple[list[int], str]:
    """The prompt's ids and its format: "chat" (the model's template) or "raw"."""
    if args.raw or not model.template.source:
        if not args.raw and not quiet:
            err(f"note: {model.name} has no chat template; sending the prompt as plain text")
        return model.text_prompt(args.prompt), "raw"
    return model.user_prompt(args.prompt, system=args.system), "chat"


# ---- loading --------------------------------------------------------------------------


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
    """Assemble a catalogue model (once), with a progress bar unless ``quiet``; its path."""
    path = catalog.prepared_path(catalog.get(name))
    if path and not force:
        return str(path)
    with _byte_progress(f"assembling {name}", enabled=not quiet) as progress:
        return str(catalog.prepare(name, force=force, progress=progress))


def _assemble_if_catalogued(spec: str, *, quiet: bool) -> None:
    """A catalogue model is assembled (once) before a backend opens it."""
    from coinfer.models import resolve

    if resolve(spec).kind == "catalog":
        prepare_with_progress(spec, quiet=quiet)


def load_from_args(
    args: argparse.Namespace, spec: str | None = None, *, quiet: bool = False, **options: Any
) -> SteerableModel:
    """The model ``spec`` (default: ``--model``) on the flags' backend, context, threads and
    device; a catalogue model is assembled first. ``options`` go to the backend."""
    from coinfer.models import load_model

    spec = spec or args.model
    check_backend(args.backend, getattr(args, "dtype", None))  # before a model is looked for
    _assemble_if_catalogued(spec, quiet=quiet)
    if not quiet:
        err(f"loading {spec} on {args.backend}…")
    return load_model(
        spec,
        backend=args.backend,
        n_ctx=args.ctx,
        n_threads=args.threads,
        device=args.device,
        kv=args.kv,
        dtype=getattr(args, "dtype", None),
        **options,
    )


def open_chat_from_args(
    args: argparse.Namespace, spec: str, *, n_ctx: int, parallel: int, keep: int = 2, quiet: bool = False
) -> Any:
    """``spec`` loaded for chat (``open_local_chat``: a cache per conversation on llama.cpp)
    on the flags' backend, threads and device; a catalogue model is assembled first."""
    from coinfer.chat import open_local_chat
    from coinfer.chat.local import PREFILL_CHUNK

    _assemble_if_catalogued(spec, quiet=quiet)
    return open_local_chat(
        spec,
        n_ctx=n_ctx,
        parallel=parallel,
        keep=keep,
        prefill_chunk=getattr(args, "prefill_chunk", None) or PREFILL_CHUNK,
        store_bytes=int((getattr(args, "cache_ram", None) or 0) * 2**20),
        admission=getattr(args, "admission", None) or "shortest",
        backend=args.backend,
        n_threads=args.threads,
        device=args.device,
        dtype=getattr(args, "dtype", None),
    )


def device_budgets(text: str | None, devices: int) -> list[float | None] | None:
    """``--memory 1.5,1.5`` (GB) or sizes such as ``800M``: one per device, or one for all."""
    if not text:
        return None
    from coinfer.models.prefetch import parse_size

    items = [t.strip() for t in text.split(",") if t.strip()]
    sizes = [float(parse_size(t + "G" if _is_number(t) else t)) for t in items]
    if len(sizes) == 1:
        sizes *= devices
    if len(sizes) != devices:
        raise ConfigError(
            f"--memory names {len(sizes)} budgets for {devices} devices", hint="give one per device"
        )
    return list(sizes)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
