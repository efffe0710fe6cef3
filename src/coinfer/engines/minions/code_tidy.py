"""The remote's job code, tidied of what cannot matter to it before it runs.

Small remote models decorate ``prepare_jobs`` with things the sandbox refuses but the
code never needs: ``from typing import List`` for its annotations, or ``import gzip``
because the document is gzip's source; or they continue the example plan's body without
its ``def``. In the first full benchmark run, 6 of 32 MinionS questions spent two paid
retries on such an import, then fell back to default jobs. This module removes only what the code
cannot depend on (function annotations, and imports of modules outside the sandbox's list
whose names nothing else uses) and wraps a bare body that returns in the function, so it
never adds anything the sandbox would refuse; whatever else is wrong still goes back to
the remote.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from dataclasses import dataclass

from coinfer.chat import python_text

__all__ = ["TidyCode", "tidy_job_code"]


@dataclass(frozen=True)
class TidyCode:
    """The code to run, what was changed in it, and why it cannot run (or "")."""

    code: str
    changes: tuple[str, ...]
    problem: str = ""


def tidy_job_code(code: str, allowed: Collection[str], entry: str = "prepare_jobs") -> TidyCode:
    """``code`` without function annotations and unused imports the sandbox lacks, and a
    bare body that returns wrapped in ``def entry``; a ``problem`` when it defines no
    ``entry`` at top level otherwise. A syntax error is left for the sandbox to report."""
    try:
        tree = python_text.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):  # the sandbox's check says why
        return TidyCode(code, ())
    changes: list[str] = []
    if not any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry for n in tree.body):
        if not any(isinstance(n, ast.Return) for n in tree.body):
            return TidyCode(code, (), f"the code does not define {entry}(documents, last_jobs, last_outputs)")
        _wrap_body(tree, entry)
        changes.append(f"a bare function body, wrapped in def {entry}")
    if _strip_function_annotations(tree):
        changes.append("function annotations")
    used = _names_used(tree)
    for parent in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list):
                block[:] = [n for n in block if not _unused_foreign_import(n, allowed, used, changes)]
                if not block and field == "body":
                    block.append(ast.Pass())
    if not changes:
        return TidyCode(code, ())
    return TidyCode(ast.unparse(ast.fix_missing_locations(tree)), tuple(changes))


def _wrap_body(tree: ast.Module, entry: str) -> None:
    """Turn top-level statements that end in ``return`` (the body of the example plan,
    continued) into ``def entry(documents, last_jobs, last_outputs)``; imports stay above."""
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    body = [n for n in tree.body if not isinstance(n, (ast.Import, ast.ImportFrom))]
    function = python_text.parse(f"def {entry}(documents, last_jobs, last_outputs):\n    pass").body[0]
    assert isinstance(function, ast.FunctionDef)
    function.body = body
    tree.body = [*imports, function]


def _strip_function_annotations(tree: ast.Module) -> bool:
    """Remove argument and return annotations, and those of assignments with a value inside
    functions (never evaluated there), in place; whether there were any."""
    stripper = _AnnotationStripper()
    stripper.visit(tree)
    return stripper.found


class _AnnotationStripper(ast.NodeTransformer):
    def __init__(self) -> None:
        self.found = False
        self._in_function = 0

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        self.found |= node.returns is not None
        node.returns = None
        self._in_function += 1
        self.generic_visit(node)
        self._in_function -= 1
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_arg(self, node: ast.arg) -> ast.AST:
        self.found |= node.annotation is not None
        node.annotation = None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if not self._in_function or node.value is None:
            return node
        self.found = True
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)


def _names_used(tree: ast.Module) -> set[str]:
    """Every name the code reads (an attribute's base included)."""
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def _unused_foreign_import(
    node: ast.stmt, allowed: Collection[str], used: set[str], changes: list[str]
) -> bool:
    """Whether ``node`` imports a module outside ``allowed`` and binds only names never used
    (noted in ``changes``)."""
    if isinstance(node, ast.Import):
        modules = [a.name for a in node.names]
        bound = [a.asname or a.name.split(".")[0] for a in node.names]
    elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
        modules = [node.module]
        bound = [a.asname or a.name for a in node.names]
    else:
        return False
    if "*" in bound or any(m.split(".")[0] in allowed for m in modules) or used & set(bound):
        return False
    changes.append(f"unused import of {', '.join(modules)}")
    return True
