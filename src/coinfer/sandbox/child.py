"""The sandbox's child process: run untrusted code under limits, answer with one JSON line.

Started by ``coinfer.sandbox.run`` as ``python -I -S child.py`` (no site
packages, no environment, no script directory on the path); standard library only, and
it never imports coinfer. It reads one JSON request from stdin:
``{"code", "inputs", "modules", "allowed", "cpu_s", "memory_mb", "output_limit"}``
and writes one JSON reply to stdout: ``{"ok": true, "result", "stdout"}`` or
``{"ok": false, "kind": "refused" | "error" | "output", "message"}``.

The layers, each enough to stop the common attacks on its own:

1. **Static check** of the syntax tree: no names or attributes that start with ``_``
   (``__subclasses__``, ``__globals__``, ``__builtins__``…), none of the frame and code
   attributes (``gi_frame``, ``f_globals``, ``tb_frame``…), imports only of allowed modules.
   A format string reaches attributes and items by name at run time
   (``'{0.__globals__}'.format(f)``), where the tree does not show them, so every
   ``.format`` and ``.format_map`` in the code is rewritten to go through a guard that
   refuses a template whose fields reach a name starting with ``_``, however the
   template was built (``guard_format``).
2. **Restricted builtins**: no ``open``, ``eval``, ``exec``, ``compile``, ``getattr``,
   ``vars``, ``globals``, ``input``…; ``import`` only finds the allowed modules, each
   seen through a namespace of its public non-module members (``re.enum.sys`` is not
   there to be reached).
3. **An audit hook** (PEP 578), installed before the code runs and impossible to remove:
   every file open, directory listing, socket, process (``os.system``, ``subprocess``,
   ``fork``, ``exec*``, ``posix_spawn``), signal, ``ctypes``, new import, code-object
   construction and frame access raises, however the code got there.
4. **Resource limits**: CPU seconds, address space, no file writes (``RLIMIT_FSIZE`` 0),
   no new processes (``RLIMIT_NPROC`` 0 where the user is not root); the parent adds a
   wall-clock timeout and caps what it reads back.
"""

from __future__ import annotations

import _string  # the format-string parser str.format itself uses
import ast
import builtins
import contextlib
import io
import json
import resource
import sys
import types
from typing import Any

FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "gi_frame", "gi_code", "gi_yieldfrom", "cr_frame", "cr_code", "cr_await", "ag_frame",
        "ag_code", "ag_await", "f_globals", "f_locals", "f_builtins", "f_back", "f_code",
        "f_trace", "tb_frame", "tb_next", "co_code", "func_globals", "func_code", "mro",
    }
)  # fmt: skip

SAFE_BUILTINS = frozenset(
    {
        "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
        "classmethod", "complex", "dict", "dir", "divmod", "enumerate", "filter", "float", "format",
        "frozenset", "hasattr", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter", "len",
        "list", "map", "max", "min", "next", "object", "oct", "ord", "pow", "property", "range", "repr",
        "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum", "super", "tuple",
        "type", "zip", "NotImplemented", "Ellipsis", "__build_class__",
    }
)  # fmt: skip

FRAME_ATTRIBUTES = frozenset({"gi_frame", "cr_frame", "ag_frame", "tb_frame", "f_back", "__globals__"})

# Audit events refused once the untrusted code may run: a prefix ends with "." or is whole.
BLOCKED_EVENTS = (
    "open", "os.", "subprocess.", "socket.", "shutil.", "ctypes.", "glob.", "pty.", "fcntl.",
    "mmap.", "resource.", "signal.", "syslog.", "sqlite3.", "pickle.", "marshal.", "urllib.",
    "http.", "ftplib.", "smtplib.", "poplib.", "imaplib.", "nntplib.", "telnetlib.", "webbrowser.",
    "winreg.", "msvcrt.", "_winapi.", "import", "code.__new__", "function.__new__",
    "builtins.input", "builtins.breakpoint", "cpython.", "sys.settrace", "sys.setprofile",
    "sys._current_frames", "sys.addaudithook", "sys.excepthook", "sys.unraisablehook",
    "setopencode", "time.sleep", "gc.",
)  # fmt: skip


FORMAT_METHODS = frozenset({"format", "format_map"})
MAX_NESTING = 200  # AST levels: the rewrite and the compiler recurse once (or twice) a level
FORMAT_GUARD = "__format_guard__"  # a builtin the code cannot name (it starts with "_")


class OutputLimitError(BaseException):
    """Printed output past the limit (a BaseException, so ``except Exception`` does not hide it)."""


class Refused(Exception):
    """The code uses something the sandbox does not allow."""


def check_code(code: str, allowed: set[str]) -> ast.Module:
    """The parsed code, or ``Refused`` naming the first forbidden construct and its line."""
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise Refused(f"syntax error on line {exc.lineno}: {exc.msg}") from None
    except (MemoryError, RecursionError):  # ``-`` * 100_000 + ``1`` exhausts the parser
        raise Refused("the code is nested too deeply to parse") from None
    except ValueError as exc:  # a lone surrogate: not text the parser can encode
        raise Refused(f"the code is not valid text: {exc}") from None
    if _nesting_over(tree, MAX_NESTING):  # ``1+1+…+1`` parses, then exhausts every recursive pass
        raise Refused(f"the code nests more than {MAX_NESTING} levels deep")
    for node in ast.walk(tree):
        line = getattr(node, "lineno", "?")
        if isinstance(node, ast.Attribute) and (node.attr[:1] == "_" or node.attr in FORBIDDEN_ATTRIBUTES):
            raise Refused(f"line {line}: attribute '{node.attr}' is not allowed")
        if isinstance(node, ast.Name) and node.id.startswith("_"):
            raise Refused(f"line {line}: names starting with '_' ('{node.id}') are not allowed")
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name not in allowed or (isinstance(node, ast.ImportFrom) and node.level):
                    listed = ", ".join(sorted(allowed))
                    raise Refused(f"line {line}: import of '{name}' is not allowed; allowed: {listed}")
            if isinstance(node, ast.ImportFrom) and any(a.name.startswith("_") for a in node.names):
                raise Refused(f"line {line}: names starting with '_' are not allowed")
    return tree


def _nesting_over(tree: ast.AST, limit: int) -> bool:
    """Whether any node lies more than ``limit`` levels below the root (an explicit stack:
    this check must not recurse itself)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return False


class _FormatThroughGuard(ast.NodeTransformer):
    """``x.format`` and ``x.format_map`` read as ``__format_guard__(x, "format")``."""

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if node.attr not in FORMAT_METHODS or not isinstance(node.ctx, ast.Load):
            return node
        guard = ast.Name(id=FORMAT_GUARD, ctx=ast.Load())
        call = ast.Call(func=guard, args=[node.value, ast.Constant(node.attr)], keywords=[])
        return ast.copy_location(call, node)


def guard_formats(tree: ast.Module) -> ast.Module:
    """The checked tree with every format method read through ``guard_format``."""
    return ast.fix_missing_locations(_FormatThroughGuard().visit(tree))


def check_template(template: object) -> None:
    """Refuse a format template whose fields (nested ones too) reach an attribute or an
    item whose name starts with ``_``: ``{0.__class__}``, ``{0[__dict__]}``."""
    if not isinstance(template, str):
        return  # str.format raises its own TypeError
    for _, field, spec, _ in _string.formatter_parser(template):
        if field:
            for _, key in _string.formatter_field_name_split(field)[1]:
                if isinstance(key, str) and key.startswith("_"):
                    message = f"format field '{{{field}}}' reaches '{key}', which the sandbox does not allow"
                    raise ValueError(message)
        if spec:
            check_template(spec)


def guard_format(obj: Any, name: str) -> Any:
    """``getattr(obj, name)`` for ``format``/``format_map``: str's own methods, bound or
    not, come back wrapped so that the template is checked before it is used."""
    value = getattr(obj, name)
    if value is getattr(str, name):

        def unbound(template: Any, /, *args: Any, **kwargs: Any) -> Any:
            check_template(template)
            return value(template, *args, **kwargs)

        return unbound
    owner = getattr(value, "__self__", None)
    if isinstance(value, types.BuiltinMethodType) and isinstance(owner, str):

        def bound(*args: Any, **kwargs: Any) -> Any:
            check_template(owner)
            return value(*args, **kwargs)

        return bound
    return value


def public_view(module: types.ModuleType) -> types.SimpleNamespace:
    """A module's public members that are not themselves modules."""
    members = {
        k: v for k, v in vars(module).items() if not k.startswith("_") and not isinstance(v, types.ModuleType)
    }
    return types.SimpleNamespace(**members)


class BoundedWriter(io.StringIO):
    """``print``'s target: keeps at most ``limit`` characters, then stops the code."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def write(self, text: str) -> int:
        if self.tell() + len(text) > self.limit:
            raise OutputLimitError(f"printed output passed the limit of {self.limit} characters")
        return super().write(text)


def restricted_builtins(views: dict[str, types.SimpleNamespace], out: BoundedWriter) -> dict[str, Any]:
    """The builtins the code sees: the safe ones, every exception class, a bounded ``print``
    and an ``__import__`` that only finds the allowed modules."""
    safe = {name: getattr(builtins, name) for name in SAFE_BUILTINS}
    for name, value in vars(builtins).items():
        if isinstance(value, type) and issubclass(value, BaseException):
            safe[name] = value

    def bounded_print(*args: Any, sep: str = " ", end: str = "\n", **_: Any) -> None:
        out.write(sep.join(str(a) for a in args) + end)

    def allowed_import(name: str, globals=None, locals=None, fromlist=(), level=0):  # type: ignore[no-untyped-def]
        if level or name not in views:
            raise ImportError(f"import of '{name}' is not allowed; allowed: {', '.join(sorted(views))}")
        return views[name]

    safe["print"] = bounded_print
    safe["__import__"] = allowed_import
    safe[FORMAT_GUARD] = guard_format
    return safe


def load_modules(allowed: list[str], sources: dict[str, str]) -> dict[str, types.SimpleNamespace]:
    """Import the allowed standard modules and build the given trusted ones, before lockdown."""
    views = {}
    for name in allowed:
        if name in sources:
            module = types.ModuleType(name)
            sys.modules[name] = module  # dataclasses and typing look classes' modules up here
            exec(compile(sources[name], f"<{name}>", "exec"), vars(module))
        else:
            module = __import__(name, fromlist=["*"])
        views[name] = public_view(module)
    return views


def audit(event: str, args: tuple[Any, ...]) -> None:
    """Refuse every blocked event (installed just before the untrusted code runs). Audited
    attribute reads are refused for frames (the way out to real globals); a function's
    ``__code__`` and defaults stay readable, because dataclasses read them."""
    if event.startswith(BLOCKED_EVENTS) or (
        event == "object.__getattr__" and len(args) > 1 and args[1] in FRAME_ATTRIBUTES
    ):
        raise RuntimeError(f"the sandbox does not allow '{event}'")


def limit_resources(cpu_s: int, memory_mb: int) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with contextlib.suppress(ValueError, OSError):  # refused to some users; root ignores it anyway
        resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


LINE_OFFSET = 1_000_000  # the code's lines are numbered from here: tracebacks then say which are its own


def execute(request: dict[str, Any]) -> dict[str, Any]:
    """Check, lock down, run; the reply to send back (``result`` already JSON text)."""
    allowed = list(request["allowed"])
    try:
        tree = check_code(request["code"], set(allowed))
    except Refused as exc:
        return {"ok": False, "kind": "refused", "message": str(exc)}
    code = compile(ast.increment_lineno(guard_formats(tree), LINE_OFFSET), "<remote code>", "exec")
    out = BoundedWriter(request["output_limit"])
    module = types.ModuleType("sandbox")  # registered: dataclasses look classes' modules up
    sys.modules["sandbox"] = module
    scope: dict[str, Any] = vars(module)
    scope.update(request["inputs"])
    scope["__builtins__"] = restricted_builtins(load_modules(allowed, request["modules"]), out)
    limit_resources(request["cpu_s"], request["memory_mb"])
    sys.addaudithook(audit)
    try:
        exec(code, scope)
        result = json.dumps(scope.get("result"), ensure_ascii=False)
    except OutputLimitError as exc:
        scope.clear()
        return {"ok": False, "kind": "output", "message": str(exc)}
    except MemoryError:
        scope.clear()  # free what the code holds, so the reply can be built
        return {"ok": False, "kind": "error", "message": "MemoryError: the code passed its memory limit"}
    except BaseException as exc:  # noqa: BLE001 - whatever the code raised goes back as text
        scope.clear()
        return {"ok": False, "kind": "error", "message": describe(exc)}
    if len(result) > request["output_limit"]:
        limit = request["output_limit"]
        return {"ok": False, "kind": "output", "message": f"`result` passed the limit of {limit} characters"}
    return {"ok": True, "result": result, "stdout": out.getvalue()}


def describe(exc: BaseException) -> str:
    """``Kind: message (line N)``, N the innermost line of the code itself (no frame is
    touched: its lines are numbered from ``LINE_OFFSET``)."""
    line, tb = None, exc.__traceback__
    while tb is not None:
        if tb.tb_lineno > LINE_OFFSET:
            line = tb.tb_lineno - LINE_OFFSET
        tb = tb.tb_next
    try:
        message = str(exc)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        message = "(unprintable)"
    if isinstance(exc, TypeError) and "JSON serializable" in message:
        return f"`result` must be JSON data (lists, dicts, strings, numbers): {message}"
    return f"{type(exc).__name__}: {message}" + (f" (line {line})" if line else "")


def main() -> None:
    reply = execute(json.loads(sys.stdin.read()))
    if reply["ok"]:  # the result is JSON text already: splice it in rather than parse it again
        stdout = json.dumps(reply["stdout"], ensure_ascii=False)
        text = f'{{"ok": true, "stdout": {stdout}, "result": {reply["result"]}}}'
    else:
        text = json.dumps(reply)
    sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass") + b"\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
