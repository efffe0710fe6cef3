"""Writes ``docs/bench/serve/prompts/unseen.jsonl``: 32 prompts that no tuning ever saw,
from other sources than the bench's suite (HumanEval, edits of it, pydoc topics), for
``coinfer bench serve --part concurrency --concurrency-prompts``.

Four kinds, eight each: explain a function of CPython's standard library (its source),
write tests for another, summarize a module's own docstring, and questions with no
document at all (where copying from the prompt has nothing to offer), interleaved. Run from the repo
root: ``python docs/bench/serve/one-off/unseen_prompts.py``; the file is the same each
time on one Python version (the sources are its standard library)."""

from __future__ import annotations

import importlib
import inspect
import json
from pathlib import Path

OUT = Path("docs/bench/serve/prompts/unseen.jsonl")

EXPLAIN = [
    "textwrap.dedent",
    "fnmatch.translate",
    "shutil.which",
    "difflib.get_close_matches",
    "statistics.median",
    "calendar.monthrange",
    "ipaddress.collapse_addresses",
    "string.capwords",
]
TESTS = [
    "heapq.nlargest",
    "colorsys.rgb_to_hls",
    "functools.total_ordering",
    "html.escape",
    "urllib.parse.urldefrag",
    "textwrap.shorten",
    "glob.escape",
    "email.utils.quote",
]
SUMMARIZE = ["argparse", "shelve", "sched", "unittest", "copy", "socketserver", "csv", "timeit"]
QUESTIONS = [
    "What is the difference between a process and a thread, and when would you use each in Python?",
    "How does a hash map handle collisions? Explain two common strategies and their trade-offs.",
    "I have a list of dictionaries with a 'date' key as an ISO string. How do I sort it newest first?",
    "Explain what a race condition is with a short example, and how a lock prevents it.",
    "What are the pros and cons of using SQLite instead of PostgreSQL for a small web app?",
    "How would you design a rate limiter for an HTTP API? Describe the token bucket algorithm.",
    "Why does 0.1 + 0.2 not equal 0.3 in most programming languages, and how should I compare floats?",
    "Write a short bash one-liner that counts the lines of all .py files in a directory tree, and "
    "explain it.",
]


def _source(path: str, limit: int = 1500) -> str:
    module, _, name = path.rpartition(".")
    text = inspect.getsource(getattr(importlib.import_module(module), name))
    return text[:limit].rsplit("\n", 1)[0]


def _chat(pid: str, category: str, content: str) -> dict[str, object]:
    return {"id": pid, "category": category, "messages": [{"role": "user", "content": content}]}


def prompts() -> list[dict[str, object]]:
    out = [_chat(f"explain/{p}", "explain",
                 f"Explain what this function does, step by step.\n\n```python\n{_source(p)}\n```")
           for p in EXPLAIN]  # fmt: skip
    out += [_chat(f"tests/{p}", "tests",
                  f"Write pytest tests for this function.\n\n```python\n{_source(p)}\n```")
            for p in TESTS]  # fmt: skip
    for name in SUMMARIZE:
        doc = (importlib.import_module(name).__doc__ or "").strip()[:1500].rsplit("\n", 1)[0]
        out.append(_chat(f"summarize/{name}", "summarize",
                         f"Summarize this documentation in a few bullet points.\n\n{doc}"))  # fmt: skip
    out += [_chat(f"question/{i}", "question", q) for i, q in enumerate(QUESTIONS)]
    return interleave(out, kinds=4)


def interleave(items: list[dict[str, object]], kinds: int) -> list[dict[str, object]]:
    """One of each kind in turn, the kinds rotated each round: a level that streams only the
    first dozen prompts (``level_requests``) still sees every kind, and every fourth prompt
    (the held-out one) is each kind in turn."""
    per = len(items) // kinds
    return [items[((k + r) % kinds) * per + r] for r in range(per) for k in range(kinds)]


if __name__ == "__main__":
    items = prompts()
    OUT.write_text("".join(json.dumps(p) + "\n" for p in items))
    print(f"wrote {len(items)} prompts to {OUT}")
