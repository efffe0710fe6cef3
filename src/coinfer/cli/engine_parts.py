"""Flags into an engine from the registry: its config (``engine_config``) and its parts
(``PartsFromArgs``), so that ``coinfer generate`` and ``coinfer serve`` open any engine
the same way, ``engine.open(parts, config)``, and never branch on an engine's name.

Each part is built by its role (``target``, ``draft``, ``drafts``, ``draft_model``,
``chat``, ``local``, ``remote``, ``model``, ``corpus``, ``cloud``, ``channel``,
``cluster``), in that order (a draft reads its target), from the flags that name it. A
subcommand that has no flags for a role says which subcommand does.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from coinfer.cli.common import (
    device_budgets,
    err,
    load_from_args,
    open_chat_from_args,
    prompt_ids,
    sampling_from_args,
)
from coinfer.errors import ConfigError

__all__ = ["CAPTURED_SPANS", "PartsFromArgs", "captured", "draft_model_name", "draft_specs", "engine_config",
           "flag_knobs"]  # fmt: skip

CAPTURED_SPANS = (256, 512, 1024)  # contexts a server's first requests reach (see HFStaticModel)

# flags whose value is an engine knob of the same name
_SAME_NAME = ("max_tokens", "draft_tokens", "alpha", "memory_budget", "pipeline", "batch_floor", "max_batch",
              "decode", "protocol")  # fmt: skip


def flag_knobs(args: argparse.Namespace, *, sampling: bool) -> dict[str, Any]:
    """Every engine knob the flags set (an engine takes those of its config's fields)."""
    knobs = {k: getattr(args, k) for k in _SAME_NAME if hasattr(args, k)}
    if knobs.get("batch_floor", 0) is None:  # not given: each engine's own default
        del knobs["batch_floor"]
    if sampling:
        knobs["sampling"] = sampling_from_args(args)
    if hasattr(args, "no_speculation"):
        knobs["speculative"] = not args.no_speculation
    if hasattr(args, "every_draft"):
        from coinfer.engines.collective import GateConfig

        knobs["gate"] = None if args.every_draft else GateConfig()
    if hasattr(args, "top_k_docs"):
        from coinfer.cli.rag import dragon_knobs

        knobs |= dragon_knobs(args)
    return knobs


def engine_config(engine: Any, args: argparse.Namespace, *, sampling: bool = True) -> Any:
    """The engine's config from the flags, made (and so checked) before any model loads."""
    return engine.config_from(flag_knobs(args, sampling=sampling))


def draft_specs(args: argparse.Namespace) -> list[str]:
    """``--drafts``: the collective drafts, comma-separated."""
    return [s.strip() for s in args.drafts.split(",") if s.strip()]


class PartsFromArgs:
    """An engine's parts built from the flags; ``close`` frees what was opened, last first.

    ``serving``: the server's (a model's batch shapes captured on a GPU; a draft of another
    vocabulary refused), else a ``generate`` run's (a draft of another vocabulary drafts
    through the text of its one prompt); ``quiet``: no loading lines."""

    # the order they are built in: a draft reads its target; DRAGON's link connects while
    # its model loads
    ROLES = ("chat", "target", "draft", "drafts", "draft_model", "local", "remote", "corpus", "cloud",
             "channel", "model", "cluster")  # fmt: skip

    def __init__(self, args: argparse.Namespace, *, serving: bool, quiet: bool = True) -> None:
        self.args, self.serving, self.quiet = args, serving, quiet
        self.parts: dict[str, Any] = {}
        self._stack = ExitStack()
        self._watches: list[Callable[[], str | None]] = []  # parts that may be lost while serving

    def build(self, engine: Any, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
        """The parts ``engine`` needs and its optional ones (but ``skip``), as the flags say."""
        wanted = set(engine.parts) | (set(engine.optional_parts) - set(skip))
        unknown = wanted - set(self.ROLES)
        if unknown:
            raise ConfigError(f"{engine.name} needs {', '.join(sorted(unknown))}, which no flag gives")
        self.check(wanted)
        for role in [r for r in self.ROLES if r in wanted]:
            self.parts[role] = getattr(self, f"_{role}")(engine)  # None: the flags say none
        return self.parts

    def check(self, roles: set[str]) -> None:
        """What the flags say of ``roles``, checked before any model loads."""
        if "drafts" in roles and not draft_specs(self.args):
            raise ConfigError("--drafts names no drafter", hint="pass --drafts ngram,qwen2.5-coder-0.5b")
        if "draft_model" in roles:
            draft_model_name(self.args)
        if "draft" in roles:
            self._heads()

    def close(self) -> None:
        self._stack.close()

    def lost_part(self) -> str | None:
        """A line naming a part lost for good (a pipeline's device that died), or None."""
        for watch in self._watches:
            if (why := watch()) is not None:
                return why
        return None

    def _opened(self, value: Any, close: Callable[[], object] | None = None) -> Any:
        self._stack.callback(close or value.close)
        return value

    # ---- models ------------------------------------------------------------------------
    def load(self, spec: str | None, role: str, batches: Any = (1,), **options: Any) -> Any:
        """A model loaded as the flags say (``options`` to the backend): under
        ``--memory-budget`` (llama.cpp), batch shapes captured when serving."""
        if getattr(self.args, "memory_budget", None) is not None and self.args.backend == "llama.cpp":
            from coinfer.models.load import budget_load_options

            options |= budget_load_options(role)
        model = self._opened(load_from_args(self.args, spec, quiet=self.quiet, **options))
        if self.serving:
            captured(model, batches)
        return model

    def _heads(self) -> bool:
        """Whether ``--draft heads:DIR`` drafts (on a llama.cpp target only)."""
        draft = str(getattr(self.args, "draft", ""))
        if not draft.startswith("heads:"):
            return False
        if self.args.backend != "llama.cpp":
            raise ConfigError("draft heads draft with a llama.cpp target", hint="drop --backend")
        return True

    def _batches(self, engine: Any) -> Any:
        return range(1, (getattr(self.args, "max_batch", 1) or 1) + 1) if engine.batches else (1,)

    def _open_chat(self, keep: int) -> Any:
        """``--model`` for chat, ``--max-batch`` conversations decoded together."""
        args = self.args
        chat = open_chat_from_args(
            args, args.model, n_ctx=args.ctx, parallel=args.max_batch, keep=keep, quiet=True
        )
        return self._opened(chat, lambda: (chat.close(), chat.model.close()))

    def _chat(self, engine: Any) -> Any:
        if self._heads():
            return None  # heads read the target's hidden states: it loads as the target
        chat = self._open_chat(self.args.keep)
        if self.serving:
            captured(chat.model, self._batches(engine))
        return chat

    def _target(self, engine: Any) -> Any:
        if "chat" in self.parts:
            return self.parts["chat"].model
        drafts_with_heads = "draft" in (*engine.parts, *engine.optional_parts) and self._heads()
        options = {"hidden_states": True} if drafts_with_heads else {}  # the heads read them
        return self.load(None, "target", self._batches(engine), **options)

    def _drafter(self, spec: str, batches: Any = (1,)) -> Any:
        from coinfer.decoding import TextDrafter, open_drafter

        if spec == "none":
            return None
        target, args = self.parts["target"], self.args
        prompt = None if self.serving else _prompt_for(target, args)
        drafter = open_drafter(
            spec, target, load=lambda name: self.load(name, "draft", batches),
            draft_prompts=lambda model: [] if prompt is None else [_prompt_for(model, args)],
            target_prompt_lens=[] if prompt is None else [len(prompt)],
        )  # fmt: skip
        self._opened(drafter)
        if isinstance(drafter, TextDrafter):
            if prompt is None:
                raise ConfigError(
                    f"the draft {spec} tokenizes differently from {target.name}: not served yet",
                    hint="serve with --draft ngram, heads:DIR or a draft model of the target's vocabulary",
                )
            if not self.quiet:
                err(f"note: {drafter.name} tokenizes differently from {target.name}: drafting through text")
        return drafter

    def _draft(self, engine: Any) -> Any:
        return self._drafter(str(self.args.draft), self._batches(engine) if self.serving else (1,))

    def _drafts(self, engine: Any) -> Any:
        specs = draft_specs(self.args)
        if any(s.startswith("heads:") for s in specs):
            raise ConfigError("draft heads draft alone, with --draft", hint="pass --draft heads:DIR")
        batches = self._batches(engine)
        return [d for d in (self._drafter(s, batches) for s in specs) if d is not None]

    def _draft_model(self, engine: Any) -> Any:
        return self.load(draft_model_name(self.args), "draft")

    # ---- the local-remote protocols ----------------------------------------------------
    def _local(self, engine: Any) -> Any:
        return self._open_chat(keep=0)

    def _remote(self, engine: Any) -> Any:
        """``--remote-base-url``'s model, or ``--remote`` served here on loopback."""
        from coinfer.chat import OpenAIChat
        from coinfer.serve.process import ServerProcess

        args = self.args
        url = args.remote_base_url
        if url is None:
            batch = args.max_batch if self.serving else 1  # a server's questions call it at once
            server = self._opened(ServerProcess(args.remote, ctx=args.remote_ctx, max_batch=batch).start(),
                                  lambda: server.stop())  # fmt: skip
            url = server.url
        return OpenAIChat(args.remote, base_url=url, api_key=args.remote_api_key)

    # ---- DRAGON ------------------------------------------------------------------------
    def _model(self, engine: Any) -> Any:
        return self.load(None, "target")

    def _corpus(self, engine: Any) -> Any:
        from coinfer.cli.rag import corpus_from_args

        if getattr(self.args, "corpus", None) is None:
            raise ConfigError(
                f"--engine {engine.name} needs this device's --corpus", hint="a folder of .txt or .md files"
            )
        return corpus_from_args(self.args)

    def _cloud(self, engine: Any) -> Any:
        from coinfer.cli.rag import cloud_of

        return cloud_of(self.args)

    def _channel(self, engine: Any) -> Any:
        """A channel to the cloud kept for every request, connecting at once."""
        from coinfer.engines.dragon import open_channel

        link = self.parts.get("cloud")
        return None if link is None else self._opened(open_channel(link))

    # ---- Jupiter -----------------------------------------------------------------------
    def _cluster(self, engine: Any) -> Any:
        args = self.args
        if not hasattr(args, "devices"):
            raise ConfigError(f"{engine.name} runs on a cluster of devices", hint="use coinfer edge launch")
        if getattr(args, "decode", None) == "sd":
            raise ConfigError(
                "--engine jupiter serves --decode naive, outline or auto", hint="drop --decode sd"
            )
        from coinfer.engines.jupiter.local import start_local_pipeline

        budgets = device_budgets(getattr(args, "memory", None), args.devices)  # checked before any start
        pipeline = start_local_pipeline(
            args.model, devices=args.devices, cores_per_device=args.cores_per_device, n_ctx=args.ctx,
            kv=args.kv, device=args.device, dtype=args.dtype, budgets=budgets,
        )  # fmt: skip
        self._opened(pipeline)
        if pipeline.unenforced is not None:
            err(f"coinfer: note: the memory budgets are planned for but not enforced ({pipeline.unenforced})")
        if self.serving:  # a device that dies stops the others; the server then says which
            pipeline.guard()
            self._watches.append(pipeline.lost_device)
        return pipeline.cluster


def _prompt_for(model: Any, args: argparse.Namespace) -> list[int]:
    return prompt_ids(model, args, quiet=True)[0]


def captured(model: Any, batches: Any) -> Any:
    """``model``, with the forward shapes of ``batches`` sequences captured where it runs
    on static caches with CUDA graphs (plain batched decoding as much as the engines: on an
    H200 a plain server that captured nothing served 4 clients at 50 tokens/s, paying
    its captures and compiles inside the requests, ``docs/bench/decode-cuda``)."""
    capture = getattr(model, "capture_shapes", None)  # models on static caches; none without graphs
    started = time.perf_counter()
    if capture is not None and (count := capture(batches=batches, spans=CAPTURED_SPANS)):
        seconds = time.perf_counter() - started
        err(f"{model.name}: {count} forward shapes captured as CUDA graphs in {seconds:.0f} s")
    return model


def draft_model_name(args: argparse.Namespace) -> str:
    """A resident draft model (LLMCad's): ``--draft`` names a model; ``auto`` is the
    catalogue's draft for the target."""
    from coinfer import catalog

    if args.draft in ("none", "ngram") or str(args.draft).startswith("heads:"):
        raise ConfigError(
            f"this engine needs a draft model, not --draft {args.draft}",
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
