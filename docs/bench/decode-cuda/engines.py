"""The engines on the GPU path, with costs measured there and acceptance from CPU runs.

No weights reach the GPU machine, and two random-weight models agree on nothing, so a
random 0.5B draft would have its tokens refused. Here the draft still runs (every
forward of the real 0.5B architecture is paid on the GPU, through ``ModelDrafter``), but
each of its tokens is replaced by the target's own greedy token with probability
``ACCEPT`` (0.91: what qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b kept on the
CPU, docs/bench/collective), and by a wrong one otherwise. The target is the random
1.5B on static caches and CUDA graphs; decoding is greedy, so every output must equal
plain decoding's, and the script checks it.

    PYTHONPATH=src python3 docs/bench/decode-cuda/engines.py
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence

from coinfer.bench.broad_suite import broad_suite
from coinfer.decoding import Draft, Drafter, NgramDrafter, SpecConfig, generate
from coinfer.decoding.model_drafters import ModelDrafter
from coinfer.engines import collective
from coinfer.models.architectures import byte_tokenizer, random_weights_model
from coinfer.models.hf_static import HFStaticModel

ACCEPT = 0.91
TOKENS = int(os.environ.get("TOKENS", "96"))
DTYPE = os.environ.get(
    "DTYPE", "bfloat16"
)  # float32: near-ties flip less (random weights' distributions are flat)
DEVICE = os.environ.get("DEVICE", "cuda")  # cpu: a quick check of this script with the 0.5B as target


class OracleDrafter(Drafter):
    """A real draft model's work, with its tokens right at the CPU-measured rate."""

    def __init__(self, inner: ModelDrafter, truth: dict[tuple[int, ...], list[int]], seed: int = 0) -> None:
        self.inner, self.truth, self.model, self.name = inner, truth, inner.model, "oracle-0.5b"
        self.rng = random.Random(seed)

    def _answer(self, context: Sequence[int]) -> list[int]:
        for prompt, tokens in self.truth.items():
            if tuple(context[: len(prompt)]) == prompt:
                return tokens[len(context) - len(prompt) :]
        return []

    def propose_many(self, contexts: Sequence[tuple[int, Sequence[int]]], k: int) -> list[Draft]:
        drafts = self.inner.propose_many(contexts, k)
        out = []
        for (_, context), draft in zip(contexts, drafts, strict=True):
            truth, tokens = self._answer(context), list(draft.tokens)
            for i in range(min(len(tokens), len(truth))):
                if self.rng.random() < ACCEPT:
                    tokens[i] = truth[i]
                else:
                    tokens[i] = (truth[i] + 1) % 256
                    break
            out.append(Draft(tokens))
        return out

    def feedback(self, key: int, context: Sequence[int], kept: Sequence[int]) -> None:
        self.inner.feedback(key, context, kept)

    def forget(self, key: int) -> None:
        self.inner.forget(key)


def generate_all(target: HFStaticModel, small: HFStaticModel, prompts: list[list[int]], rows: dict) -> dict:
    """Every configuration on every prompt; the oracle's truth is plain decoding's output."""
    plain = [generate(target, ids, draft=None, config=SpecConfig(max_tokens=TOKENS)) for ids in prompts]
    truth = {tuple(ids): r.tokens for ids, r in zip(prompts, plain, strict=True)}
    rows["plain"] = plain
    for label, k in (("oracle 0.5b, auto k", "auto"), ("oracle 0.5b, k=4", 4), ("ngram, auto k", "auto")):
        runs = []
        for ids in prompts:
            drafter = (
                NgramDrafter()
                if label.startswith("ngram")
                else OracleDrafter(ModelDrafter(small, target=target), truth)
            )
            runs.append(
                generate(target, ids, draft=drafter, config=SpecConfig(max_tokens=TOKENS, draft_tokens=k))
            )
            drafter.close()
        rows[label] = runs
    oracle = OracleDrafter(ModelDrafter(small, target=target), truth)
    rows["collective gated (oracle 0.5b + ngram), batch 1"] = collective.generate(
        target,
        prompts,
        drafts=[oracle, NgramDrafter()],
        config=collective.CollectiveConfig(max_tokens=TOKENS, max_batch=1),
    )
    return rows


def decode_rate(runs: list) -> float:
    """Tokens after the first over the time from the first to the last, all runs pooled."""
    tokens = sum(r.stats.n_tokens - 1 for r in runs)
    return tokens / sum((r.stats.n_tokens - 1) / r.stats.decode_tokens_per_s for r in runs)


def main() -> None:
    tok = byte_tokenizer()
    big = "qwen2.5-1.5b" if DEVICE == "cuda" else "qwen2.5-0.5b"
    target = HFStaticModel(
        random_weights_model(big, device=DEVICE, dtype=DTYPE), tok, name="target", n_ctx=4096
    )
    small = HFStaticModel(
        random_weights_model("qwen2.5-0.5b", device=DEVICE, seed=1, dtype=DTYPE), tok, name="0.5b", n_ctx=4096
    )
    prompts = []
    for p in broad_suite()[::7][: int(os.environ.get("PROMPTS", "8"))]:
        ids = tok("\n".join(m["content"] for m in p["messages"]))["input_ids"][-512:]
        prompts.append(ids)
    generate_all(target, small, prompts[:2], {})  # warm-up: every shape compiled and captured once
    rows = generate_all(target, small, prompts, {})
    plain = rows["plain"]
    base = decode_rate(plain)
    report = {}
    for label, runs in rows.items():
        rate = decode_rate(runs)
        same = sum(a.tokens == b.tokens for a, b in zip(runs, plain, strict=True))
        drafted = sum(r.stats.drafted for r in runs)
        accepted = sum(r.stats.accepted for r in runs)
        report[label] = {
            "tok_s": round(rate, 1),
            "vs_plain": round(rate / base, 3),
            "identical": same,
            "drafted": drafted,
            "accepted": accepted,
        }
        print(
            f"{label:48s} {rate:7.1f} tok/s  {rate / base:5.2f}x  identical {same}/{len(runs)}  "
            f"accepted {accepted}/{drafted}"
        )
    extras = rows["collective gated (oracle 0.5b + ngram), batch 1"][-1].extras
    print("collective extras:", json.dumps(extras, default=str)[:1500])
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, f"engines-{DTYPE}.json"), "w") as f:
            json.dump(
                {
                    "accept": ACCEPT,
                    "tokens": TOKENS,
                    "dtype": DTYPE,
                    "rows": report,
                    "collective_extras": extras,
                },
                f,
                default=str,
                indent=1,
            )


if __name__ == "__main__":
    main()
