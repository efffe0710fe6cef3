"""``coinfer edge``: one model served by several devices as a pipeline (Jupiter, paper 004).

``edge launch`` starts ``--devices`` local workers, each pinned to its own cores, becomes
device 0 itself, and generates: the same output, summary line and ``--json`` as
``coinfer generate``. ``edge worker`` runs one device for a launcher on another host.

Both turn flags into the library's calls (``coinfer.engines.jupiter.local``): the devices
are started and fenced there, and the request runs on the pipeline's watched thread, so
that Ctrl-C or a worker that dies stops every process at once, with one line naming the
device.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Iterator
from typing import Any

from coinfer.cli.common import (
    add_dtype_flag,
    add_output_flags,
    add_sampling_flags,
    check_trace_path,
    device_budgets,
    err,
    sampling_from_args,
)
from coinfer.errors import CoinferError, ConfigError

__all__ = [
    "add_parser",
    "cmd_launch",
    "cmd_worker",
    "stage_placement",
]

DEFAULT_EDGE_MODEL = "qwen2.5-coder-0.5b"


def _request(pipeline: Any, args: argparse.Namespace) -> Iterator[tuple[str, Any]]:
    """The request (on the pipeline's watched thread): load the model over the devices,
    stream, and say what comes: its prompt format, each response, the trace, the end."""
    from coinfer.cli.common import prompt_ids
    from coinfer.decoding.trace import TraceRecorder, recorded
    from coinfer.engines.jupiter import JupiterConfig, stream

    config = JupiterConfig(
        max_tokens=args.max_tokens, sampling=sampling_from_args(args),
        pipelined_prefill=not args.plain_prefill, min_part=args.min_part, parts=args.parts,
        decode=args.decode, tree_width=args.tree_width, adaptive_tree=not args.whole_tree,
    )  # fmt: skip
    cluster = pipeline.connect(args.model, n_ctx=args.ctx, kv=args.kv, dtype=args.dtype, split=args.split)
    try:
        if args.heads:
            from coinfer.models.heads import DraftHeads

            cluster.use_heads(DraftHeads.load(args.heads))
        prompt, fmt = prompt_ids(cluster.text, args, quiet=args.json)
        yield "begin", fmt
        question = args.prompt if args.decode in ("outline", "auto") else prompt
        recorder = None
        if args.trace:
            recorder = TraceRecorder("jupiter", model=args.model, draft=args.heads and "heads",
                                     prompt=args.prompt, detokenize=cluster.text.detokenize)  # fmt: skip
        for response in recorded(stream(cluster, question, config=config, system=args.system), recorder):
            yield "response", response
    finally:
        cluster.close()
    if recorder is not None:
        yield "trace", recorder.finish()
    yield "done", cluster.text.detokenize


def _devices(args: argparse.Namespace) -> Any:
    """The pipeline's devices from the flags: local workers, or, with ``--listen``, those
    started elsewhere; this process pinned to device 0's cores."""
    from coinfer.engines.jupiter.local import await_devices, launch_devices

    budgets = device_budgets(args.memory, args.devices)  # checked before anything starts
    device = stage_placement(args)[1]
    if args.listen:
        return await_devices(
            args.listen, args.devices, cores_per_device=args.cores_per_device, budgets=budgets, device=device,
            pin=True,
        )  # fmt: skip
    return launch_devices(
        args.devices, cores_per_device=args.cores_per_device, budgets=budgets, device=device, pin=True
    )


def cmd_launch(args: argparse.Namespace) -> int:
    if args.decode == "sd" and not args.heads:
        raise ConfigError("--decode sd needs draft heads", hint="give --heads DIR (coinfer edge train-heads)")
    if args.decode in ("outline", "auto") and args.raw:
        raise ConfigError(f"--decode {args.decode} writes its own chat turns: it cannot take --raw")
    check_trace_path(args.trace)
    pipeline = _devices(args)
    if pipeline.unenforced is not None:
        err(f"coinfer: note: the memory budgets are planned for but not enforced ({pipeline.unenforced})")
    if args.listen:
        err(f"coinfer: waiting for {args.devices - 1} devices at {pipeline.master} (coinfer edge worker)")
    try:
        responses, fmt, detokenize = _follow(pipeline, args)
        memory = pipeline.memory()
    except KeyboardInterrupt:
        pipeline.stop()
        err("coinfer: interrupted; every device stopped")
        sys.stdout.flush()
        os._exit(130)  # the request's thread may sit in a gloo call of a closed group
    finally:
        pipeline.stop()
    _report(args, responses, fmt, detokenize, memory)
    return 0


def _follow(pipeline: Any, args: argparse.Namespace) -> tuple[list[Any], str, Any]:
    """Responses as they come (echoed, the trace saved); a device that dies or an error
    ends the run with one line."""
    from coinfer.decoding.trace import save_trace

    responses: list[Any] = []
    fmt, detokenize = "chat", None
    for kind, value in pipeline.watched(lambda: _request(pipeline, args)):
        if kind == "begin":
            fmt = value
        elif kind == "response":
            responses.append(value)
            if not args.json:
                sys.stdout.write(value.text)
                sys.stdout.flush()
        elif kind == "trace" and args.trace is not None:
            save_trace(value, args.trace)
        elif kind == "done":
            detokenize = value
    return responses, fmt, detokenize


def _report(
    args: argparse.Namespace, responses: list[Any], fmt: str, detokenize: Any, memory: dict[str, Any] | None
) -> None:
    from coinfer.cli.generate import summary_lines

    last = responses[-1] if responses else None
    tokens = [t for r in responses for t in r.tokens]
    finish = (last.finish_reason if last else None) or "length"
    if args.json:
        out = {
            "text": detokenize(tokens),
            "n_tokens": len(tokens),
            "finish_reason": finish,
            "model": args.model,
            "backend": "transformers",
            "engine": "jupiter",
            "prompt_format": fmt,
            "draft": "none",
            "stats": last.stats.as_dict() if last else {},
            "extras": last.extras if last else {},
        }
        if memory is not None:
            out["memory"] = memory
        print(json.dumps(out, ensure_ascii=False))
        return
    sys.stdout.write("\n")
    for line in summary_lines(last, finish, drafted=False):
        err(line)
    if last is not None:
        devices = last.extras.get("devices", [])
        err(
            f"[{len(devices)} devices, layers "
            + ", ".join(f"{d['name']} {d['layers'][0]}-{d['layers'][1]}" for d in devices)
            + f", prompt in {len(last.extras.get('parts', []))} parts]"
        )
        if "router" in last.extras or "outline" in last.extras:
            route, points = last.extras.get("router", {}), last.extras.get("outline") or []
            how = f"outline of {len(points)} points" if points else "sequential"
            err(f"[decoded: {how}; router: {route.get('reason', '-')}]")


def cmd_worker(args: argparse.Namespace) -> int:
    from coinfer.engines.jupiter import run_worker
    from coinfer.engines.jupiter.local import memory_fences
    from coinfer.sandbox.cgroup import remove_all

    cores = [int(c) for c in args.cores.split(",")] if args.cores else sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, cores)
    budgets = device_budgets(args.memory, 1)
    groups, why = memory_fences(budgets)
    if why is not None:
        err(f"coinfer: note: the memory budget is planned for but not enforced ({why})")
    me = os.getpid()
    code = 0
    try:
        run_worker(
            args.rank, args.world, args.master, name=args.name or socket.gethostname(), threads=len(cores),
            budget=int(budgets[0] or 0) if budgets else None,
            before_load=(lambda: groups[0].adopt(me)) if groups else None, device=args.device or "cpu",
            dtype=args.dtype,
        )  # fmt: skip
    except CoinferError as exc:
        err(f"coinfer: error: device {args.rank}: {str(exc).splitlines()[0]}")
        code = 2
    except RuntimeError as exc:  # gloo: the group broke (rank 0 or a neighbour went away)
        err(f"coinfer: error: device {args.rank} lost the group: {str(exc).splitlines()[0][:200]}")
        code = 1
    except KeyboardInterrupt:
        code = 130
    remove_all(groups, member=me)
    if code:
        os._exit(code)  # a gloo thread may still hold the broken group
    return 0


def _add_decode_flags(launch: Any) -> None:
    launch.add_argument(
        "--decode", default="naive", choices=["naive", "sd", "outline", "auto"],
        help="naive: one token per pass; sd: self-drafting heads propose a token tree (needs --heads); "
        "outline: an outline, then its points decoded together; auto: the router picks outline or sequential",
    )  # fmt: skip
    launch.add_argument("--heads", default=None, help="draft heads' folder (coinfer edge train-heads)")
    launch.add_argument("--tree-width", type=int, default=1, help="sd: head 1's guesses the tree branches on")
    launch.add_argument(
        "--whole-tree", action="store_true",
        help="sd: verify every candidate each round (default: the part that pays, down to none)",
    )  # fmt: skip


def _add_device_flag(parser: Any) -> None:
    parser.add_argument(
        "--device", default=None, help="where this host's stages run: cpu (default) or cuda[:N]"
    )


def stage_placement(args: argparse.Namespace) -> tuple[str, str]:
    """(KV cache kind, device) of this host's stages from ``--kv`` and ``--device``: the CPU
    by default, static caches by default off it (the dynamic-cache stage runs on the CPU,
    in float32: a ``--dtype`` it cannot take is refused here too)."""
    from coinfer.engines.jupiter.local import placement

    return placement(getattr(args, "device", None), getattr(args, "kv", None), getattr(args, "dtype", None))


def add_parser(sub: Any) -> None:
    p = sub.add_parser("edge", help="one model served by several devices as a pipeline (Jupiter)")
    edge = p.add_subparsers(dest="edge_command", required=True)
    launch = edge.add_parser("launch", help="start local devices and generate")
    launch.add_argument("prompt")
    launch.add_argument(
        "--model", "-m", default=DEFAULT_EDGE_MODEL, help="catalogue name, .gguf or model dir"
    )
    launch.add_argument("--devices", type=int, default=2, help="devices (processes) in the pipeline")
    launch.add_argument("--cores-per-device", type=int, default=1, help="cores each device is pinned to")
    launch.add_argument("--memory", default=None, help="memory budget per device, e.g. 1.5,1.5 (GB) or 800M")
    launch.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help="start no local workers: wait here for "
        "devices 1.. started elsewhere with coinfer edge worker --master HOST:PORT ($COINFER_EDGE_TOKEN)",
    )
    launch.add_argument("--split", default="jupiter", choices=["jupiter", "memory"], help="layer plan: "
                        "jupiter (profiled, Eq. 1) or memory (exo's memory-proportional split)")  # fmt: skip
    launch.add_argument("--plain-prefill", action="store_true", help="read the prompt in one piece")
    launch.add_argument(
        "--parts", type=int, default=None, help="cut the prompt in this many parts (default: Eq. 4 decides)"
    )
    launch.add_argument(
        "--min-part", type=int, default=None, help="shortest prompt sub-sequence (default: from the profiles)"
    )
    _add_decode_flags(launch)
    launch.add_argument("--max-tokens", "-n", type=int, default=256, help="tokens to generate at most")
    launch.add_argument("--ctx", type=int, default=4096, help="context window")
    launch.add_argument(
        "--kv", default=None, choices=["dynamic", "static"],
        help="each device's KV cache: transformers' dynamic one (CPU), or static buffers, whose "
        "forwards are CUDA graphs on a GPU (default: static off the CPU)",
    )  # fmt: skip
    _add_device_flag(launch)
    add_dtype_flag(launch)
    add_sampling_flags(launch)
    launch.add_argument("--system", default=None, help="a system message for the chat template")
    launch.add_argument("--raw", action="store_true", help="send the prompt as plain text, no chat template")
    add_output_flags(launch, trace=True)
    launch.set_defaults(func=cmd_launch)
    _add_worker_parser(edge)
    from coinfer.cli.edge_train import add_train_parser

    add_train_parser(edge)


def _add_worker_parser(edge: Any) -> None:
    worker = edge.add_parser("worker", help="run one device of a pipeline whose rank 0 is elsewhere")
    worker.add_argument("--rank", type=int, required=True)
    worker.add_argument("--world", type=int, required=True)
    worker.add_argument("--master", required=True, help="rank 0's HOST:PORT")
    worker.add_argument("--cores", default=None, help="cores to pin to, e.g. 2,3 (default: all)")
    worker.add_argument("--name", default=None, help="this device's name (default: the host name)")
    worker.add_argument(
        "--memory",
        default=None,
        help="this device's memory budget, e.g. 1.5 (GB) or 800M; held by a "
        "memory cgroup where this runs as root, and told to rank 0, which plans the layers under it "
        "(a GPU stage's layers are planned under its GPU's memory instead)",
    )
    _add_device_flag(worker)
    add_dtype_flag(
        worker, "this device's stage's weights and activations, whatever rank 0 asks (static caches; "
        "default: rank 0's --dtype, else float32 on the CPU and bfloat16 on a GPU)",
    )  # fmt: skip
    worker.set_defaults(func=cmd_worker)
