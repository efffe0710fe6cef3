"""Jupiter's stages on the GPU path: ``StaticStage`` (static caches, CUDA graphs) against the
dynamic-cache ``Stage``, and the engine's speculative decoding with heads through it.

Part 1, the forwards a stage runs (random-weights Qwen2.5 architectures, ``DTYPE``): after a
``CONTEXT``-token prompt, the median ms of one token, of the heads' candidate trees
(``widened_choices(K, width)`` under the pending token) and of a 16-token chain, on each
kind of stage; and what the greedy verification reads back (a tree's logits, or one id a
row: ``StaticStage.choices``).

Part 2, the engine (float32, so that greedy outputs are comparable): the random 1.5B saved as
a model folder, served as one device (``EdgeCluster(kv="static", device="cuda")``, which
profiles its static stage on the GPU for the planner: printed as ``profile_ms``), plain
decoding and speculative decoding with untrained heads (each guesses what the target's own
head would say next: their acceptance is not a real model's, see the CPU runs in
docs/bench/jupiter/), on suite prompts; sd's text must equal plain decoding's.

    OUT=/tmp/out PYTHONPATH=src python3 docs/bench/decode-cuda/jupiter.py
    # on a CPU, to try it: ARCHS=tiny DEVICE=cpu PROMPTS=2 TOKENS=8 ... (a two-layer model)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402

from coinfer.bench.broad_suite import broad_suite  # noqa: E402
from coinfer.decoding.self_draft import widened_choices  # noqa: E402
from coinfer.engines.jupiter.stage import Stage  # noqa: E402
from coinfer.engines.jupiter.static_stage import StaticStage  # noqa: E402
from coinfer.models.architectures import byte_tokenizer, random_weights_model  # noqa: E402
from coinfer.models.tree import TokenTree  # noqa: E402
from serve import whole_vocabulary  # noqa: E402

ARCHS = os.environ.get("ARCHS", "qwen2.5-0.5b,qwen2.5-1.5b,qwen2.5-7b").split(",")
ENGINE_ARCH = os.environ.get("ENGINE_ARCH", "qwen2.5-1.5b")
DEVICE = os.environ.get("DEVICE", "cuda")
DTYPE = os.environ.get("DTYPE", "bfloat16")
CONTEXT = int(os.environ.get("CONTEXT", "512"))
PROMPTS = int(os.environ.get("PROMPTS", "8"))
TOKENS = int(os.environ.get("TOKENS", "96"))
REPEATS = 20
TREES = ((3, 1), (3, 2), (3, 3))  # (heads, width): 4, 7 and 10 nodes with the pending token


def build(arch: str, dtype: str) -> Any:
    if arch != "tiny":
        return random_weights_model(arch, device=DEVICE, dtype=dtype)
    from transformers import AutoModelForCausalLM, Qwen2Config

    config = Qwen2Config(vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         eos_token_id=256, tie_word_embeddings=True)  # fmt: skip
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype)).to(DEVICE)


def sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def timed_ms(fn: Callable[[], Any], repeats: int = REPEATS) -> float:
    fn()  # a new shape's capture (and compile) is not what is timed
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return round(1000 * statistics.median(times), 3)


def tree_parents(k: int, width: int) -> list[int]:
    """The pending token and the candidate tree of ``widened_choices(k, width)`` under it."""
    choices = widened_choices(k, width)
    tree = TokenTree.from_paths([[10 + d * width + j for d, j in enumerate(c)] for c in choices])
    return [-1, *(p + 1 if p >= 0 else 0 for p in tree.parents)]


def forwards(arch: str) -> dict[str, Any]:
    """Part 1 for one architecture."""
    stages = {"dynamic": Stage(build(arch, DTYPE), 0, _layers(arch)),
              "static": StaticStage(build(arch, DTYPE), 0, _layers(arch), n_ctx=2 * CONTEXT)}  # fmt: skip
    vocab = int(stages["static"].config.vocab_size)
    prompt = torch.randint(3, min(5000, vocab), (1, CONTEXT), generator=torch.Generator().manual_seed(0))
    out: dict[str, Any] = {"arch": arch, "dtype": DTYPE, "context": CONTEXT}
    for kind, stage in stages.items():
        stage.forward(prompt, 0, logits="none")

        def run(call: Callable[[], Any], s: Any = stage) -> Callable[[], Any]:
            def once() -> Any:
                result = call()
                s.truncate(CONTEXT)
                return result

            return once

        row = {
            "token_ms": timed_ms(
                run(lambda s=stage: s.forward(torch.tensor([[7]]), CONTEXT, logits="hidden"))
            )
        }
        chain = torch.arange(20, 36)[None]
        row["chain16_ms"] = timed_ms(run(lambda s=stage, x=chain: s.forward(x, CONTEXT, logits="none")))
        for k, width in TREES:
            parents = tree_parents(k, width)
            ids = torch.arange(20, 20 + len(parents))[None]
            name = f"tree{len(parents)}"
            row[f"{name}_ms"] = timed_ms(run(lambda s=stage, p=parents, x=ids: s.forward_tree(x, CONTEXT, p)))
            hidden = stage.forward_tree(ids, CONTEXT, parents)[0]
            stage.truncate(CONTEXT)
            logits = lambda s=stage, h=hidden: s.head(h).float().cpu().numpy()  # noqa: E731
            row[f"{name}_read_logits_ms"] = timed_ms(logits)
            row[f"{name}_read_ids_ms"] = timed_ms(lambda s=stage, h=hidden: s.choices(h))
        if isinstance(stage, StaticStage):
            row["graphs"] = stage.graph_count
        out[kind] = row
        print(arch, kind, row, flush=True)
    del stages
    if DEVICE.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


def _layers(arch: str) -> int:
    from coinfer.models.architectures import _config

    return 2 if arch == "tiny" else int(_config(arch).num_hidden_layers)


def engine() -> dict[str, Any]:
    """Part 2: plain and speculative decoding through a one-device static cluster."""
    from coinfer.engines.jupiter import EdgeCluster, JupiterConfig, generate
    from coinfer.models.heads import DraftHeads, config_digest

    folder = tempfile.mkdtemp()
    model = build(ENGINE_ARCH, "float32")
    model.save_pretrained(folder)
    whole_vocabulary(byte_tokenizer(), model.config.vocab_size).save_pretrained(folder)
    del model
    start = time.perf_counter()
    cluster = EdgeCluster(
        folder, world=1, master="127.0.0.1:1", threads=4, kv="static", device=DEVICE, dtype="float32"
    )
    setup_s = time.perf_counter() - start
    cluster.use_heads(DraftHeads.zeros(model="random", digest=config_digest(folder),
                                       hidden=int(cluster.shape.hidden), heads=3))  # fmt: skip
    suite = broad_suite()
    texts = ["\n".join(m["content"] for m in p["messages"])[-1500:] for p in suite[:: len(suite) // PROMPTS]]
    prompts = [cluster.text.tokenize(t)[-CONTEXT:] for t in texts[:PROMPTS]]
    runs: dict[str, Any] = {}
    for warm in (True, False):  # the first pass meets every shape; the second is timed
        plain, sd = (
            JupiterConfig(max_tokens=TOKENS),
            JupiterConfig(max_tokens=TOKENS, decode="sd", tree_width=2),
        )
        for name, config in (("plain", plain), ("sd", sd)):
            results = [generate(cluster, p, config=config) for p in (prompts[:2] if warm else prompts)]
            if not warm:
                decode_s = sum(r.stats.total_s - r.stats.ttft_s for r in results)
                runs[name] = {
                    "tokens": [list(r.tokens) for r in results],
                    "decode_tok_s": round(sum(r.stats.n_tokens - 1 for r in results) / decode_s, 1),
                    "rounds": sum(r.stats.rounds for r in results),
                    "accepted": sum(r.stats.accepted for r in results),
                }
    graphs = cluster.stage.graph_count
    prof = cluster.devices[0].profile  # what the planner read: the static stage timed on DEVICE
    cluster.close()
    same = sum(a == b for a, b in zip(runs["plain"]["tokens"], runs["sd"]["tokens"], strict=True))
    out = {
        "arch": ENGINE_ARCH,
        "setup_s": round(setup_s, 1),
        "graphs": graphs,
        "identical": f"{same}/{len(prompts)}",
        "profile_ms": {
            "layer, 1 token after 0": round(1000 * float(prof.q(1, 0)), 4),
            "layer, 16 tokens after 512": round(1000 * float(prof.q(16, 512)), 4),
            "layer, 512 tokens after 0": round(1000 * float(prof.q(512, 0)), 4),
            "head, 1 token": round(1000 * prof.head_s, 4),
        },
    }
    for name, r in runs.items():
        out[name] = {k: v for k, v in r.items() if k != "tokens"}
    print(out, flush=True)
    return out


def main() -> None:
    result: dict[str, Any] = {"device": torch.cuda.get_device_name() if DEVICE.startswith("cuda") else DEVICE}
    result["forwards"] = [forwards(a) for a in ARCHS]
    result["engine"] = engine()
    target = os.environ.get("OUT")
    if target:
        os.makedirs(target, exist_ok=True)
        with open(os.path.join(target, "jupiter.json"), "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
