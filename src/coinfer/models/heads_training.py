"""Training self-drafting heads on CPU by self-distillation (Medusa-1's recipe, shrunk).

1. Prompts nobody here wrote (``bench.workloads.head_training_prompts``: CPython's
   documentation topics and HumanEval's prompts, every fourth of each held out).
2. ``generate_corpus``: the model answers each prompt greedily (llama.cpp, the same
   weights); the token ids go to a JSON-lines file, one line per prompt, so a stopped run
   resumes where it was.
3. ``corpus_features``: one transformers forward per answer gives the last hidden state
   (after the final norm) at every position of the answer, and the ids after it.
4. ``train_heads``: each head's residual block learns, with the model's ``lm_head``
   frozen, to predict the token ``1 + k`` places after the next. The loss is taken over
   the tokens the training answers use (the full vocabulary would cost 10-20x as much on a
   CPU); ``head_accuracy`` judges on the full vocabulary. A checkpoint after every
   ``checkpoint_every`` steps (heads, Adam's moments, the step) makes training resumable.

Progress goes to a ``progress(stage, done, total)`` callback; nothing is printed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coinfer.errors import ConfigError
from coinfer.models.heads import DraftHeads

__all__ = [
    "Features",
    "TrainConfig",
    "corpus_features",
    "generate_corpus",
    "head_accuracy",
    "head_vocabulary",
    "train_heads",
]

Progress = Callable[[str, int, int], None]


def _quiet(stage: str, done: int, total: int) -> None:
    """No progress report."""


def generate_corpus(
    model: Any, prompts: Sequence[str], path: Path, *, max_tokens: int, progress: Progress = _quiet
) -> list[dict[str, list[int]]]:
    """The model's greedy answer to each prompt (``model``: a ``SteerableModel``), kept in
    ``path`` (JSON lines of ``prompt`` and ``answer`` ids); lines already there are kept.
    A prompt that leaves no room for ``max_tokens`` in the model's context gets no answer."""
    import numpy as np

    rows = _read_jsonl(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    eos = set(getattr(model, "eos_ids", ()) or ())
    with path.open("a") as f:
        for i, text in enumerate(prompts):
            progress("generate", i, len(prompts))
            if i < len(rows):
                continue
            prompt = model.user_prompt(text)
            answer: list[int] = []
            if len(prompt) + max_tokens > model.n_ctx:  # kept as a line with no answer
                rows.append({"prompt": prompt, "answer": answer})
                f.write(json.dumps(rows[-1]) + "\n")
                continue
            seq = model.new_sequence()
            try:
                logits = model.extend(seq, prompt, last_only=True)
                while len(answer) < max_tokens:
                    token = int(np.argmax(logits[-1]))
                    answer.append(token)
                    if token in eos:
                        break
                    logits = model.extend(seq, [token])
            finally:
                model.release(seq)
            rows.append({"prompt": prompt, "answer": answer})
            f.write(json.dumps(rows[-1]) + "\n")
            f.flush()
    progress("generate", len(prompts), len(prompts))
    return rows[: len(prompts)]


def _read_jsonl(path: Path) -> list[dict[str, list[int]]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut short by a stop: generated again
    return rows


@dataclass
class Features:
    """Per position of the answers: the last hidden state (n, d) and the ids that follow
    it, ``after[i, j]`` = the token j + 1 places on (-1 past the answer's end)."""

    hidden: Any
    after: Any


def corpus_features(
    model: Any, rows: Sequence[dict[str, list[int]]], *, k: int, progress: Progress = _quiet
) -> Features:
    """One forward of ``model`` (a transformers ``*ForCausalLM``) per prompt and answer:
    the answer's positions (the last prompt token's included) and ``k + 1`` ids after each."""
    import torch

    hidden, after = [], []
    for i, row in enumerate(rows):
        progress("features", i, len(rows))
        if not row["answer"]:
            continue
        ids = list(row["prompt"]) + list(row["answer"])
        start = len(row["prompt"]) - 1
        with torch.inference_mode():
            out = model.model(input_ids=torch.tensor([ids]))
        hidden.append(out.last_hidden_state[0, start:-1].float())
        tail = torch.tensor(ids[start + 1 :] + [-1] * (k + 1))
        n = len(ids) - 1 - start
        after.append(torch.stack([tail[j : j + n] for j in range(k + 1)], dim=1))
    progress("features", len(rows), len(rows))
    if not hidden:
        raise ConfigError(
            "no prompt left room for an answer in the model's context",
            hint="lower --max-tokens or use a model with a longer context",
        )
    return Features(torch.cat(hidden), torch.cat(after))


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 2
    batch: int = 256
    lr: float = 1e-3
    seed: int = 0
    checkpoint_every: int = 50

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch < 1 or self.lr <= 0 or self.checkpoint_every < 1:
            raise ConfigError(
                "epochs, batch and checkpoint_every must be >= 1 and lr > 0", hint="e.g. --epochs 2 --lr 1e-3"
            )


def train_heads(
    heads: DraftHeads,
    lm_head: Any,
    data: Features,
    *,
    config: TrainConfig,
    checkpoint: Path | None = None,
    progress: Progress = _quiet,
) -> DraftHeads:
    """Train ``heads`` in place on ``data`` (resuming from ``checkpoint`` if it exists)."""
    import torch

    weight = heads.weight.clone().requires_grad_(True)
    bias = heads.bias.clone().requires_grad_(True)
    opt = torch.optim.Adam([weight, bias], lr=config.lr)
    step = _resume(checkpoint, weight, bias, opt) if checkpoint is not None else 0
    vocab, labels = _label_space(data.after[:, 1:])
    table = lm_head.weight.detach()[vocab]  # (V', d): the tokens the answers use
    per_epoch = (len(labels) + config.batch - 1) // config.batch
    total = per_epoch * config.epochs
    trial = DraftHeads(weight, bias, heads.meta)
    while step < total:
        epoch, at = divmod(step, per_epoch)
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(config.seed + epoch))
        rows = order[at * config.batch : (at + 1) * config.batch]
        loss = _head_loss(trial.residual(data.hidden[rows]), table, labels[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        progress("train", step, total)
        if checkpoint is not None and (step % config.checkpoint_every == 0 or step == total):
            _save_checkpoint(checkpoint, weight, bias, opt, step)
    heads.weight, heads.bias = weight.detach(), bias.detach()
    return heads


def head_vocabulary(data: Features) -> Any:
    """The token ids the heads learn to predict: those the training answers use, sorted
    (the loss is taken over them; a drafter may take its guesses among them too)."""
    return _used(data.after[:, 1:])


def _used(after: Any) -> Any:
    import torch

    return torch.unique(after[after >= 0])


def _label_space(after: Any) -> tuple[Any, Any]:
    """The ids the heads must predict, as a compact vocabulary: (ids used, labels in it;
    -1 where the answer had ended)."""
    import torch

    used = _used(after)
    index = torch.full((int(after.max()) + 2,), -1, dtype=torch.long)
    index[used] = torch.arange(len(used))
    return used, torch.where(after >= 0, index[after.clamp(min=0)], -1)


def _head_loss(residual: Any, table: Any, labels: Any) -> Any:
    """Cross-entropy of each head's logits over the compact vocabulary: (n, K, d) against
    (n, K) labels, -1 ignored."""
    import torch

    logits = residual @ table.T  # (n, K, V')
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-1)


def head_accuracy(heads: DraftHeads, lm_head: Any, data: Features, *, batch: int = 512) -> list[float]:
    """Each head's top-1 accuracy on ``data`` over the full vocabulary."""
    import torch

    hits = torch.zeros(heads.k)
    seen = torch.zeros(heads.k)
    with torch.inference_mode():
        for i in range(0, len(data.hidden), batch):
            guess = heads.guesses(data.hidden[i : i + batch], lm_head)[..., 0]  # (n, K)
            truth = data.after[i : i + batch, 1:]
            valid = truth >= 0
            hits += ((guess == truth) & valid).sum(0)
            seen += valid.sum(0)
    return [round(float(h / s), 4) if s else 0.0 for h, s in zip(hits, seen, strict=True)]


def _save_checkpoint(path: Path, weight: Any, bias: Any, opt: Any, step: int) -> None:
    from safetensors.torch import save_file

    state = opt.state_dict()["state"]
    tensors = {"weight": weight.detach(), "bias": bias.detach()}
    for i, name in enumerate(("weight", "bias")):
        if i in state:
            tensors[f"{name}.exp_avg"] = state[i]["exp_avg"]
            tensors[f"{name}.exp_avg_sq"] = state[i]["exp_avg_sq"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(tmp), metadata={"step": str(step)})
    tmp.replace(path)


def _resume(path: Path, weight: Any, bias: Any, opt: Any) -> int:
    """Load ``path`` into the heads and the optimizer; the step it was taken at (0: none)."""
    import torch
    from safetensors import safe_open

    if not path.is_file():
        return 0
    with safe_open(str(path), framework="pt") as f:
        step = int((f.metadata() or {}).get("step", 0))
        tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (safe_open has no iterator)
    with torch.no_grad():
        weight.copy_(tensors["weight"])
        bias.copy_(tensors["bias"])
    if "weight.exp_avg" in tensors:
        state = opt.state_dict()
        for i, name in enumerate(("weight", "bias")):
            state["state"][i] = {
                "step": torch.tensor(float(step)),
                "exp_avg": tensors[f"{name}.exp_avg"],
                "exp_avg_sq": tensors[f"{name}.exp_avg_sq"],
            }
        opt.load_state_dict(state)
    return step
