"""``coinfer bench decode --device cuda``: what a forward costs on a GPU, against its limit.

For each model it times one forward of ``b`` sequences by ``k`` new tokens on top of a
cached prompt (the verifier's shape: greedy choices read back, every row's), on the
static-cache CUDA-graph path and, for a few k, on the eager dynamic-cache path. Next to
them stands the model's bandwidth limit: its weight bytes over the GPU's memory bandwidth,
measured here by a device-to-device copy. Models named by architecture (``ARCHITECTURES``)
are built with random weights (speed does not depend on their values); the report says
so. An identity check decodes the speculative suite's prompts greedily on both paths, in
float32 (random weights give flat distributions, where bfloat16 rounding alone flips
near-ties), plainly and speculatively, and counts the prompts whose tokens match.
Trees of LLMCad's shape (``llmcad_tree``: a few branches from the context) are timed at
batch 1 next to chains of the same width, since one captured forward serves both.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from coinfer.bench.broad_suite import broad_suite
from coinfer.bench.report import environment, write_json, write_markdown
from coinfer.decoding import NgramDrafter, SpecConfig, generate
from coinfer.errors import ConfigError
from coinfer.models.architectures import ARCHITECTURES, byte_tokenizer, random_weights_model, weight_bytes
from coinfer.models.hf import HFModel, import_torch
from coinfer.models.hf_static import ForwardRow, HFStaticModel
from coinfer.models.tree import TokenTree

__all__ = [
    "CudaDecodeConfig",
    "eager_forward_ms",
    "identity_counts",
    "llmcad_tree",
    "memory_bandwidth_gbs",
    "report_markdown",
    "run_cuda_decode_bench",
    "static_forward_ms",
    "static_tree_ms",
    "suite_ids",
]


@dataclass(frozen=True)
class CudaDecodeConfig:
    out: str
    models: tuple[str, ...] = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b")
    ks: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    batches: tuple[int, ...] = (1, 2, 4, 8)
    eager_ks: tuple[int, ...] = (1, 16)
    trees: tuple[int, ...] = (16, 48)  # LLMCad's tree sizes, timed at batch 1
    prefill: int = 512
    repeats: int = 20
    identity_models: tuple[str, ...] = ("qwen2.5-0.5b", "qwen2.5-1.5b")
    identity_tokens: int = 24
    identity_prompts: int = 56
    n_ctx: int = 4096

    def __post_init__(self) -> None:
        unknown = [m for m in (*self.models, *self.identity_models) if m not in ARCHITECTURES]
        if unknown:
            raise ConfigError(
                f"bench decode --device cuda builds published architectures; unknown: {', '.join(unknown)}",
                hint=f"choose among {', '.join(ARCHITECTURES)}",
            )
        if min((*self.ks, *self.batches, *self.eager_ks, *self.trees), default=1) < 1 or self.repeats < 1:
            raise ConfigError("ks, batches, trees and repeats must be >= 1")
        if max(self.batches) * (self.prefill + max(self.ks)) > 16 * self.n_ctx:
            raise ConfigError("the prefill and the widest forward must fit the context")


def memory_bandwidth_gbs(torch: Any, nbytes: int = 1 << 30, repeats: int = 10) -> float:
    """The GPU's device-to-device copy rate, bytes read plus written, in GB/s."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        dst.copy_(src)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000 / repeats
    del src, dst
    return 2 * nbytes / seconds / 1e9


def _timed_ms(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall ms of ``fn`` (which reads its result back to the host, so it has synced)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def static_forward_ms(model: HFStaticModel, prefill: int, k: int, b: int, repeats: int) -> float:
    """One forward of ``b`` sequences by ``k`` tokens after ``prefill`` cached tokens each,
    greedy choices read back (the same columns rewritten each time: nothing accumulates)."""
    rng = np.random.default_rng(k * 100 + b)
    seqs = [model.new_sequence() for _ in range(b)]
    try:
        for seq in seqs:
            model.extend(seq, rng.integers(0, 256, prefill).tolist(), last_only=True)
        chain = rng.integers(0, 256, k).tolist()
        rows = [ForwardRow.chain(s.slot, prefill, chain) for s in seqs]  # type: ignore[attr-defined]
        return _timed_ms(lambda: model.forward_rows(rows, "argmax"), repeats)
    finally:
        for seq in seqs:
            model.release(seq)


def llmcad_tree(width: int, branches: int = 4) -> TokenTree:
    """A tree of ``width`` tokens in ``branches`` chains hanging from the context, the shape
    LLMCad verifies (its ``max_branches`` is 4)."""
    per = -(-width // branches)
    parents = [-1 if i % per == 0 else i - 1 for i in range(width)]
    return TokenTree.of([(7 * i + 3) % 256 for i in range(width)], parents)


def static_tree_ms(model: HFStaticModel, prefill: int, tree: TokenTree, repeats: int) -> float:
    """One forward of ``tree`` after ``prefill`` cached tokens, greedy choices read back."""
    seq = model.new_sequence()
    try:
        model.extend(
            seq, np.random.default_rng(len(tree.tokens)).integers(0, 256, prefill).tolist(), last_only=True
        )
        row = ForwardRow.tree(seq.slot, prefill, tree)  # type: ignore[attr-defined]
        return _timed_ms(lambda: model.forward_rows([row], "argmax"), repeats)
    finally:
        model.release(seq)


def eager_forward_ms(model: HFModel, prefill: int, k: int, repeats: int) -> float:
    """The same forward at batch 1 on the dynamic-cache path (``extend``, then rolled back)."""
    rng = np.random.default_rng(k)
    seq = model.new_sequence()
    try:
        model.extend(seq, rng.integers(0, 256, prefill).tolist(), last_only=True)
        chain = rng.integers(0, 256, k).tolist()

        def once() -> None:
            model.extend_greedy(seq, chain)
            model.truncate(seq, prefill)

        return _timed_ms(once, repeats)
    finally:
        model.release(seq)


@contextmanager
def _pair(name: str, dtype: str, n_ctx: int, slots: int) -> Iterator[tuple[HFStaticModel, HFModel]]:
    """One random-weights model behind both paths (the weights shared), freed after."""
    model = random_weights_model(name, device="cuda", dtype=dtype)
    tok = byte_tokenizer()
    static = HFStaticModel(model, tok, name=name, n_ctx=n_ctx, slots=slots)
    eager = HFModel(model, tok, name=name, n_ctx=n_ctx)
    try:
        yield static, eager
    finally:
        static.close()
        eager.close()
        import_torch().cuda.empty_cache()


def measure_speed(name: str, config: CudaDecodeConfig, bandwidth: float) -> dict[str, Any]:
    with _pair(name, "bfloat16", config.n_ctx, max(config.batches)) as (static, eager):
        nbytes = weight_bytes(static.model)
        return {
            "model": name,
            "weights": "random (the published architecture)",
            "weight_gb": round(nbytes / 1e9, 3),
            "limit_ms": round(nbytes / (bandwidth * 1e9) * 1000, 3),
            "static_ms": {
                str(b): {
                    str(k): round(static_forward_ms(static, config.prefill, k, b, config.repeats), 3)
                    for k in config.ks
                }
                for b in config.batches
            },
            "eager_ms": {
                str(k): round(eager_forward_ms(eager, config.prefill, k, config.repeats), 3)
                for k in config.eager_ks
            },
            "tree_ms": {
                str(w): round(static_tree_ms(static, config.prefill, llmcad_tree(w), config.repeats), 3)
                for w in config.trees
            },
            "tree_chain_ms": {
                str(w): round(static_forward_ms(static, config.prefill, w, 1, config.repeats), 3)
                for w in config.trees
            },
            "graphs": static.graph_count,
        }


def suite_ids(tokenizer: Any, n: int, limit: int) -> list[list[int]]:
    """The speculative suite's first ``n`` prompts as ids (messages joined), those of at
    most ``limit`` tokens."""
    out = []
    for prompt in broad_suite()[:n]:
        text = "\n".join(m["content"] for m in prompt["messages"])
        ids = tokenizer(text)["input_ids"]
        if len(ids) <= limit:
            out.append(ids)
    return out


def identity_counts(
    static: HFStaticModel, eager: HFModel, prompts: list[list[int]], n: int
) -> tuple[int, int]:
    """How many prompts decode to the eager path's greedy tokens on static caches: plainly,
    and speculatively with n-gram drafts of 4 (chains of several widths, rolled back)."""
    plain_same = spec_same = 0
    for ids in prompts:
        want = generate(eager, ids, draft=None, config=SpecConfig(max_tokens=n)).tokens
        plain_same += generate(static, ids, draft=None, config=SpecConfig(max_tokens=n)).tokens == want
        drafter = NgramDrafter()
        try:
            got = generate(static, ids, draft=drafter, config=SpecConfig(max_tokens=n, draft_tokens=4))
        finally:
            drafter.close()
        spec_same += got.tokens == want
    return plain_same, spec_same


def check_identity(name: str, config: CudaDecodeConfig) -> dict[str, Any]:
    """``identity_counts`` of the architecture ``name`` in float32 on every fitting prompt."""
    prompts = suite_ids(byte_tokenizer(), config.identity_prompts, config.n_ctx - config.identity_tokens - 8)
    with _pair(name, "float32", config.n_ctx, 4) as (static, eager):
        plain, spec = identity_counts(static, eager, prompts, config.identity_tokens)
    return {"model": name, "prompts": len(prompts), "plain_identical": plain, "spec_identical": spec}


def run_cuda_decode_bench(config: CudaDecodeConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    torch = import_torch()
    if not torch.cuda.is_available():
        raise ConfigError(
            "bench decode --device cuda needs a CUDA GPU, and torch sees none here",
            hint="run it on a machine with an NVIDIA GPU and a CUDA build of torch, or use --device cpu",
        )
    bandwidth = memory_bandwidth_gbs(torch)
    log(f"bench decode --device cuda on {torch.cuda.get_device_name()}: copy bandwidth {bandwidth:.0f} GB/s")
    out = Path(config.out)
    report: dict[str, Any] = {
        "config": asdict(config),
        "environment": {
            **environment(),
            "gpu": torch.cuda.get_device_name(),
            "bandwidth_gbs": round(bandwidth),
        },
        "results": [],
        "identity": [],
    }
    for name in config.models:  # the files are rewritten after each model: a cut run keeps its rows
        log(f"  {name}…")
        row = measure_speed(name, config, bandwidth)
        report["results"].append(row)
        _write(report, config, out)
        log(
            f"    b=1 {row['static_ms'].get('1')} ms; trees {row['tree_ms']}; "
            f"eager {row['eager_ms']}; limit {row['limit_ms']}"
        )
    for name in config.identity_models:
        report["identity"].append(check_identity(name, config))
        _write(report, config, out)
        log(f"  identity {report['identity'][-1]}")
    _write(report, config, out)
    report["files"] = {"json": str(out / "results.json"), "markdown": str(out / "results.md")}
    return report


def _write(report: dict[str, Any], config: CudaDecodeConfig, out: Path) -> None:
    write_json(out / "results.json", report)
    write_markdown(out / "results.md", report_markdown(report, config))


def report_markdown(report: dict[str, Any], config: CudaDecodeConfig) -> str:
    env = report["environment"]
    lines = [
        "# coinfer bench decode --device cuda",
        "",
        f"{env['gpu']}, copy bandwidth {env['bandwidth_gbs']} GB/s; torch {env['torch']}, "
        f"transformers {env['transformers']}. Random weights, published Qwen2.5 shapes, bfloat16; "
        f"one forward of b sequences by k tokens after {config.prefill} cached tokens each, median "
        f"of {config.repeats}, greedy choices read back.",
        "",
    ]
    head = [
        "model",
        "b",
        *[f"k={k}" for k in config.ks],
        "limit",
        "eager k=" + ",".join(map(str, config.eager_ks)),
    ]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["results"]:
        for b in config.batches:
            cells = [r["model"], str(b), *[f"{r['static_ms'][str(b)][str(k)]:.2f}" for k in config.ks]]
            tail = (
                [f"{r['limit_ms']:.2f}", ", ".join(f"{v:.2f}" for v in r["eager_ms"].values())]
                if b == 1
                else ["", ""]
            )
            lines.append("| " + " | ".join(cells + tail) + " |")
    lines += _tree_lines(report, config)
    if not report["identity"]:
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "| model (float32) | prompts | plain identical | speculative identical |",
        "|---|---|---|---|",
    ]
    for r in report["identity"]:
        lines.append(f"| {r['model']} | {r['prompts']} | {r['plain_identical']} | {r['spec_identical']} |")
    return "\n".join(lines) + "\n"


def _tree_lines(report: dict[str, Any], config: CudaDecodeConfig) -> list[str]:
    """The tree table: each tree's forward against a chain of as many tokens (batch 1)."""
    if not config.trees:
        return []
    head = ["model", *[f"tree {w} / chain {w}" for w in config.trees], "tree / one token"]
    lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in report["results"]:
        one = r["static_ms"]["1"].get("1") if "1" in r["static_ms"] else None
        cells = [f"{r['tree_ms'][str(w)]:.2f} / {r['tree_chain_ms'][str(w)]:.2f}" for w in config.trees]
        widest = r["tree_ms"][str(max(config.trees))]
        ratio = f"{widest / one:.2f}x (tree {max(config.trees)})" if one else ""
        lines.append("| " + " | ".join([r["model"], *cells, ratio]) + " |")
    return lines
