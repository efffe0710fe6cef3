"""The engines on the GPU path, with costs measured there and acceptance from CPU runs.

No weights reach the GPU machine, and two random-weight models agree on nothing, so a
random 0.5B draft would have its tokens refused. Here the draft still runs (every
forward of the real 0.5B architecture is paid on the GPU, through ``ModelDrafter``), but
each of its tokens is replaced by the target's own greedy token with probability
``ACCEPT`` (0.91: what qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b kept on the
CPU, docs/bench/collective), and by a wrong one otherwise. The target is the random
1.5B on static caches and CUDA graphs; decoding is greedy, so every output must equal
plain decoding's, and the script checks it.

Batch 4 (the collective engine batched, plain batched decoding beside it) is measured in
aggregate tokens over the call's wall time, prefills included. LLMCad's rows run its
trees with the random 0.5B itself as the draft: its tokens are nearly all refused, so
they time the tree machinery at its worst and check that its output is plain decoding's.

    PYTHONPATH=src python3 docs/bench/decode-cuda/engines.py
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Sequence

from coinfer.bench.broad_suite import broad_suite
from coinfer.decoding import Draft, Drafter, NgramDrafter, SpecConfig, generate
from coinfer.decoding.model_drafters import ModelDrafter
from coinfer.engines import collective, llmcad
from coinfer.models.architectures import byte_tokenizer, random_weights_model
from coinfer.models.hf_static import HFStaticModel

ACCEPT = 0.91
TOKENS = int(os.environ.get("TOKENS", "96"))
CONTEXT = int(os.environ.get("CONTEXT", "512"))  # each prompt's last CONTEXT tokens
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


class Captures(dict):
    """``rows`` that also counts the graphs each configuration captured while timed (a
    shape the warm-up missed costs a capture, tens of milliseconds, inside the timing)."""

    def __init__(self, target: HFStaticModel, small: HFStaticModel) -> None:
        super().__init__()
        self.models, self.new = (target, small), {}
        self.before = self._count()

    def _count(self) -> tuple[int, int, int]:
        from torch._dynamo.utils import counters  # graphs dynamo compiled: seconds each

        return self.models[0].graph_count, self.models[1].graph_count, int(counters["stats"]["unique_graphs"])

    def __setitem__(self, label: str, value: tuple) -> None:
        now = self._count()
        self.new[label] = {
            "target": now[0] - self.before[0],
            "draft": now[1] - self.before[1],
            "compiles": now[2] - self.before[2],
        }
        self.before = now
        super().__setitem__(label, value)


def generate_all(
    target: HFStaticModel, small: HFStaticModel, prompts: list[list[int]], rows: dict, tokens: int = TOKENS
) -> dict:
    """Every configuration on every prompt; the oracle's truth is plain decoding's output.
    ``rows[label]``: (responses, wall seconds of the whole configuration)."""
    start = time.perf_counter()
    plain = [generate(target, ids, draft=None, config=SpecConfig(max_tokens=tokens)) for ids in prompts]
    rows["plain"] = (plain, time.perf_counter() - start)
    truth = {tuple(ids): r.tokens for ids, r in zip(prompts, plain, strict=True)}
    for label, k in (("oracle 0.5b, auto k", "auto"), ("oracle 0.5b, k=4", 4), ("ngram, auto k", "auto")):
        runs, start = [], time.perf_counter()
        for ids in prompts:
            drafter = (
                NgramDrafter()
                if label.startswith("ngram")
                else OracleDrafter(ModelDrafter(small, target=target), truth)
            )
            runs.append(
                generate(target, ids, draft=drafter, config=SpecConfig(max_tokens=tokens, draft_tokens=k))
            )
            drafter.close()
        rows[label] = (runs, time.perf_counter() - start)
    for batch in (1, 4):
        for label, drafts in (
            (f"plain batched, batch {batch}", []),
            (f"collective gated (oracle 0.5b + ngram), batch {batch}", None),
        ):
            if batch == 1 and not label.startswith("collective"):
                continue
            drafts = (
                [OracleDrafter(ModelDrafter(small, target=target), truth), NgramDrafter()]
                if drafts is None
                else []
            )
            config = collective.CollectiveConfig(
                max_tokens=tokens, max_batch=batch, draft_tokens="auto" if drafts else 0
            )
            start = time.perf_counter()
            runs = collective.generate(target, prompts, drafts=drafts, config=config)
            rows[label] = (runs, time.perf_counter() - start)
    for label, gate in (
        ("llmcad gated (random 0.5b draft)", True),
        ("llmcad trees only (random 0.5b draft)", False),
    ):
        start = time.perf_counter()
        try:
            runs = [
                llmcad.generate(
                    target, ids, draft=small, config=llmcad.LLMCadConfig(max_tokens=tokens, gate=gate)
                )
                for ids in prompts
            ]
        except Exception as exc:  # noqa: BLE001  (a failure is a result: it is reported, the rest run)
            rows[label] = (exc, 0.0)
            continue
        rows[label] = (runs, time.perf_counter() - start)
    return rows


def phases(runs: list) -> dict[str, float]:
    """Seconds by phase (forward, logits, draft, policy, accept, detok), all runs pooled."""
    out: dict[str, float] = {}
    for r in runs:
        for name, seconds in r.stats.phases.items():
            out[name] = round(out.get(name, 0.0) + seconds, 4)
    return out


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
    if os.environ.get("CAPTURE"):  # the likely shapes captured at load, not inside the timed runs
        start = time.perf_counter()
        n = sum(m.capture_shapes(batches=(1, 2, 3, 4), spans=(256, 512, 1024)) for m in (target, small))
        print(f"captured {n} graphs at load in {time.perf_counter() - start:.1f} s", flush=True)
    prompts = []
    for p in broad_suite()[::7][: int(os.environ.get("PROMPTS", "8"))]:
        ids = tok("\n".join(m["content"] for m in p["messages"]))["input_ids"][-CONTEXT:]
        prompts.append(ids)
    generate_all(target, small, prompts[:4], {}, tokens=32)  # warm-up: shapes compiled and captured
    captured = Captures(target, small)
    rows = generate_all(target, small, prompts, captured)
    plain = rows["plain"][0]
    batched_base = (
        sum(r.stats.n_tokens for r in rows["plain batched, batch 4"][0]) / rows["plain batched, batch 4"][1]
    )
    report = {}
    for label, (runs, wall) in rows.items():
        if isinstance(runs, Exception):
            report[label] = {"error": f"{type(runs).__name__}: {runs}"}
            print(f"{label:48s} failed: {report[label]['error']}")
            continue
        aggregate = "batch 4" in label
        rate = sum(r.stats.n_tokens for r in runs) / wall if aggregate else decode_rate(runs)
        base = batched_base if aggregate else decode_rate(plain)
        same = sum(a.tokens == b.tokens for a, b in zip(runs, plain, strict=True))
        drafted = sum(r.stats.drafted for r in runs)
        accepted = sum(r.stats.accepted for r in runs)
        report[label] = {
            "measure": "aggregate tokens / wall s" if aggregate else "decode tok/s",
            "tok_s": round(rate, 1),
            "vs_plain": round(rate / base, 3),
            "identical": same,
            "drafted": drafted,
            "accepted": accepted,
            "phases_s": phases(runs),
            "wall_s": round(wall, 3),
            "graphs_captured": captured.new.get(label),
            "prefill_s": runs[-1].extras.get("prefill_s") if runs and runs[-1].extras else None,
        }
        print(
            f"{label:48s} {rate:7.1f} tok/s  {rate / base:5.2f}x  identical {same}/{len(runs)}  "
            f"accepted {accepted}/{drafted}  wall {wall:.2f}s  graphs {captured.new.get(label)}  "
            f"phases {phases(runs)}"
        )
    extras = {label: rows[label][0][-1].extras for label in rows if label.startswith("collective")}
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
