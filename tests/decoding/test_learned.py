"""What an engine learns lives in a session's ``Learned``, never in a module global: two
sessions over one model are independent unless given the same ``Learned``."""

from __future__ import annotations

import ast
from pathlib import Path

import coinfer
from coinfer.chat import python_text
from coinfer.decoding import NgramDrafter, SpecConfig
from coinfer.decoding.engine import Request
from coinfer.decoding.learned import Learned
from coinfer.decoding.speculative import target_costs
from coinfer.testing import ScriptedModel

PACKAGE = Path(coinfer.__file__).parent
# containers that start empty and fill as a process runs
_FILLED_AT_RUN_TIME = {"WeakKeyDictionary", "WeakValueDictionary", "WeakSet", "defaultdict", "OrderedDict",
                       "dict", "set", "list", "Counter", "deque"}  # fmt: skip
# a reference that must outlive the call that made it, not learned state: llama.cpp's log
# callback (ctypes frees a callback Python no longer holds)
_ALLOWED_GLOBALS = {("models/llamacpp_hooks.py", "_LOG_CALLBACK")}


def _called(node: ast.expr) -> str | None:
    if not isinstance(node, ast.Call) or node.args or node.keywords:
        return None
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def _empty_container(node: ast.expr) -> bool:
    if isinstance(node, ast.Dict):
        return not node.keys
    if isinstance(node, (ast.List, ast.Set)):
        return not node.elts
    return _called(node) in _FILLED_AT_RUN_TIME


def test_no_module_keeps_state_that_fills_as_the_process_runs() -> None:
    """No module-level empty dict, WeakKeyDictionary, list… (filled later, they would be
    process-wide learned state) and no ``global`` rebinding, in the whole package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        tree = python_text.parse(path.read_text(encoding="utf-8"))  # beside any thread a test left parsing
        for node in tree.body:
            value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
            if value is not None and _empty_container(value):
                found.append(f"{where}:{node.lineno}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Global):
                found += [
                    f"{where}:{node.lineno} global {n}"
                    for n in node.names
                    if (where, n) not in _ALLOWED_GLOBALS
                ]
    assert found == []


def test_the_scan_finds_a_module_global_cache() -> None:
    tree = ast.parse("import weakref\n_COSTS = weakref.WeakKeyDictionary()\n_SEEN: dict[str, int] = {}\n")
    assert [_empty_container(n.value) for n in tree.body[1:]] == [True, True]  # type: ignore[attr-defined]
    assert not _empty_container(ast.parse("X = {'a': 1}").body[0].value)  # type: ignore[attr-defined]


def test_learned_state_is_made_once_per_model_and_kind_and_goes_with_the_session() -> None:
    a, b = ScriptedModel(lambda prefix: 3), ScriptedModel(lambda prefix: 3)
    learned = Learned()
    curve = learned.of(a, "costs", list)
    assert learned.of(a, "costs", list) is curve and learned.of(b, "costs", list) is not curve
    assert learned.of(a, "other", list) is not curve and learned.known(a, "costs")
    learned.close()
    assert not learned.known(a, "costs")


def _chatty(prefix: list[int]) -> int:
    return (len(prefix) * 5) % 11 + 20  # a repeating text, so n-gram drafts hold


def test_two_sessions_over_one_model_learn_apart_unless_they_share() -> None:
    """The speculative engine's cost curve: each session measures its own; a session
    given another's ``Learned`` starts from what that one measured."""
    target = ScriptedModel(_chatty, n_ctx=512)
    engine = coinfer.engines.get("speculative")
    config = SpecConfig(max_tokens=40, draft_tokens="auto")
    first = engine.open({"target": target, "draft": NgramDrafter()}, config)
    second = engine.open({"target": target, "draft": NgramDrafter()}, config)
    first.generate(Request(prompt=[1, 2, 3, 4, 5, 6]))
    measured = target_costs(target, first.learned).forwards
    assert measured > 0
    assert target_costs(target, second.learned).forwards == 0  # the other session learned nothing
    shared = engine.open({"target": target}, config, learned=first.learned)
    shared.generate(Request(prompt=[1, 2, 3, 4, 5, 6]))
    assert target_costs(target, first.learned).forwards > measured
    for s in (first, second, shared):
        s.close()
