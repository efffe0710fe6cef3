"""OpenAI tool calls on a model whose chat template takes tools.

The tools a request declares go into the prompt through the model's own chat template
(Qwen2.5's and Hermes' templates list them in the system turn and ask for each call as
``<tool_call>{"name": …, "arguments": …}</tool_call>``). The reply is read back into
OpenAI's ``tool_calls``:

* every ``<tool_call>`` block, the text before the first one being the message's content;
* or, as llama.cpp's Hermes parser also takes it, a reply that is nothing but one call's
  JSON object (or a list of them), bare or in a ```json fence: the Qwen2.5-Coder models
  answer so;
* or what follows a family's call marker, the text before it being the content: Llama
  3.x's ``<|python_tag|>`` before a call's JSON (``{"name": …, "parameters": …}``, several
  parted by ``;``), before a built-in tool's call (``brave_search.call(query="…")``: keyword
  arguments whose values are literals, read by ``ast``, never run), or before code for the
  code interpreter (a declared ``code_interpreter`` or ``python`` tool that takes ``code``),
  and Mistral's ``[TOOL_CALLS]`` before a list of calls or, in its newer
  templates, before each call as ``name[ARGS]{…}``. A Mistral call gets a 9-character id,
  the only kind its template takes back;

and only where every call names a declared tool with a JSON object for its arguments.
Anything else stays the reply's text, whole: a reply is never cut or guessed at.
``tool_choice`` ``"required"`` or one function forces a call by constraining the reply to
the calls' JSON schema (``forced_schema``), where the engine can constrain its tokens.

A stream shows content as it comes, except text that may begin a call: from a tag or
marker on (``OPENERS``, or the beginning of one at the end), or from the start when the
reply opens like a bare call. That is held to the end and then sent as the calls, or as
text if it was none (``ToolCallScanner``).
"""

from __future__ import annotations

import ast
import json
import re
import secrets
import string
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from coinfer.chat import python_text
from coinfer.errors import ConfigError

__all__ = [
    "MAX_TOOLS",
    "OPENERS",
    "TAG",
    "ToolCall",
    "ToolCallScanner",
    "Tools",
    "call_arguments_as",
    "first_opener",
]

MAX_TOOLS = 128  # as OpenAI allows
TAG, END_TAG = "<tool_call>", "</tool_call>"
PYTHON_TAG, MISTRAL_CALLS, MISTRAL_ARGS = "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]"
OPENERS = (TAG, PYTHON_TAG, MISTRAL_CALLS)  # what begins a reply's calls, by model family
_LONGEST_OPENER = max(map(len, OPENERS))
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"^```(?:json|JSON)?[ \t]*\n?(.*?)\n?\s*```$", re.DOTALL)
_FENCE_OPEN = re.compile(r"```(?:json|JSON)?[ \t]*\n?\s*")
_ANY_OBJECT = {"type": "object"}
_CODE_TOOLS = ("code_interpreter", "python")  # tools Llama 3.x calls with bare code after its tag


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _mistral_id() -> str:
    """Mistral's templates refuse a history whose call ids are not 9 letters or digits."""
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))


@dataclass(frozen=True)
class ToolCall:
    """One call the model made: a declared tool's name and its arguments as JSON text."""

    name: str
    arguments: str
    id: str = field(default_factory=_call_id)

    def as_openai(self, index: int | None = None) -> dict[str, Any]:
        """OpenAI's shape: a message's ``tool_calls`` item, or a stream's (with ``index``)."""
        function = {"name": self.name, "arguments": self.arguments}
        out = {"id": self.id, "type": "function", "function": function}
        return out if index is None else {"index": index, **out}


@dataclass(frozen=True)
class Tools:
    """A request's tools (OpenAI's ``{"type": "function", "function": {…}}`` items) and
    its ``tool_choice``: ``"auto"``, ``"required"``, or the one tool's name it must call;
    ``parallel``: whether a reply may carry several calls."""

    specs: tuple[dict[str, Any], ...]
    choice: str = "auto"
    parallel: bool = True

    def names(self) -> tuple[str, ...]:
        return tuple(str(s["function"]["name"]) for s in self.specs)

    @property
    def forces(self) -> bool:
        """Whether the reply must be a call (``required``, or a named tool)."""
        return self.choice != "auto"

    def forced_schema(self) -> dict[str, Any] | None:
        """The JSON schema a reply must follow to be a call, or None where the model may
        answer in text (``auto``)."""
        if not self.forces:
            return None
        wanted = [s["function"] for s in self.specs if self.choice in ("required", s["function"]["name"])]
        alternatives = [
            {
                "type": "object",
                "properties": {"name": {"const": f["name"]}, "arguments": f.get("parameters") or _ANY_OBJECT},
                "required": ["name", "arguments"],
            }
            for f in wanted
        ]
        return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}

    def read(self, text: str) -> tuple[str | None, list[ToolCall]]:
        """The reply's content and its calls; ``(text, [])`` when it made none."""
        at, opener = first_opener(text)
        calls = []
        if opener == TAG:
            calls = self._tagged(text[at:])
        elif opener is not None:
            calls = self._marked(text[at:], opener)
        if not calls:  # no opener, or one inside a bare call's arguments
            at, calls = 0, self._bare(text)
        if not calls:
            return text, []
        return text[:at].rstrip() or None, calls if self.parallel else calls[:1]

    def scanner(self) -> ToolCallScanner:
        return ToolCallScanner(self)

    # ---- reading calls -----------------------------------------------------------------
    def _tagged(self, text: str) -> list[ToolCall]:
        """Every ``<tool_call>`` block of ``text`` (which begins with one), or none when a
        block is not a call or text other than blocks follows."""
        blocks = list(_BLOCK.finditer(text))
        if "".join(text[a.end() : b.start()] for a, b in zip(blocks, blocks[1:], strict=False)).strip():
            return []
        if text[blocks[-1].end() :].strip():
            return []
        return self._each([_json(b.group(1)) for b in blocks])

    def _bare(self, text: str) -> list[ToolCall]:
        """The calls of a reply that is nothing but their JSON, bare or fenced."""
        body = text.strip()
        fenced = _FENCE.match(body)
        value = _json(fenced.group(1) if fenced else body)
        return self._each(value if isinstance(value, list) and value else [value])

    def _marked(self, text: str, marker: str) -> list[ToolCall]:
        """The calls after a family's marker (``text`` begins with it), or none when
        anything after it is not a call."""
        if marker == PYTHON_TAG:  # Llama 3.x: one call's JSON, or several parted by ";"
            body = text[len(marker) :]
            parts = body.split(";")
            found = self._bare(body) or (self._each([_json(p) for p in parts]) if len(parts) > 1 else [])
            return found or self._each([_builtin_call(body)]) or self._code(body)
        calls: list[ToolCall] = []
        for piece in text.split(marker)[1:]:  # Mistral: a list of calls, or name[ARGS]{…} each
            name, args, arguments = piece.partition(MISTRAL_ARGS)
            found = self._each([{"name": name.strip(), "arguments": _json(arguments)}]) if args else []
            found = found or self._bare(piece)
            if not found:
                return []
            calls += [replace(c, id=_mistral_id()) for c in found]
        return calls

    def _code(self, body: str) -> list[ToolCall]:
        """Llama 3.x's code interpreter: the code after ``<|python_tag|>`` as a call of a
        declared ``code_interpreter`` or ``python`` tool that takes ``code`` (or declares no
        parameters), as llama.cpp reads it; none where no such tool is declared."""
        code = body.strip()
        for spec in self.specs:
            function = spec["function"]
            properties = (function.get("parameters") or {}).get("properties") or {}
            if code and function["name"] in _CODE_TOOLS and (not properties or "code" in properties):
                return [ToolCall(str(function["name"]), json.dumps({"code": code}, ensure_ascii=False))]
        return []

    def _each(self, values: list[Any]) -> list[ToolCall]:
        """A call for each value, or none unless every value is one."""
        calls = [self._call(v) for v in values]
        return [c for c in calls if c is not None] if all(calls) else []

    def _call(self, value: Any) -> ToolCall | None:
        """A call when ``value`` names a declared tool and gives it an object of arguments."""
        if not isinstance(value, dict) or value.get("name") not in self.names():
            return None
        arguments = value.get("arguments", value.get("parameters", {}))
        if isinstance(arguments, str):
            arguments = _json(arguments)
        if not isinstance(arguments, dict):
            return None
        return ToolCall(str(value["name"]), json.dumps(arguments, ensure_ascii=False))


def first_opener(text: str) -> tuple[int, str | None]:
    """Where the first of the ``OPENERS`` in ``text`` begins, and which; ``(-1, None)``."""
    found = [(at, o) for o in OPENERS if (at := text.find(o)) >= 0]
    return min(found) if found else (-1, None)


def call_arguments_as(messages: Sequence[Mapping[str, Any]], *, text: bool) -> list[dict[str, Any]]:
    """The messages with each call's arguments as JSON text (OpenAI's shape, ``text``) or
    as objects (chat templates' shape); arguments that are not JSON are refused."""
    out = []
    for i, m in enumerate(messages):
        if not m.get("tool_calls"):
            out.append(dict(m))
            continue
        calls = []
        for c in m["tool_calls"]:
            arguments = c["function"]["arguments"]
            if text and not isinstance(arguments, str):
                arguments = json.dumps(arguments, ensure_ascii=False)
            elif not text and isinstance(arguments, str):
                arguments = _json(arguments)
                if not isinstance(arguments, dict):
                    raise ConfigError(
                        f"message {i}: a call's arguments must be a JSON object",
                        hint="give them as a JSON object, or as its JSON text as OpenAI does",
                    )
            calls.append({**c, "function": {**c["function"], "arguments": arguments}})
        out.append({**m, "tool_calls": calls})
    return out


def _builtin_call(text: str) -> dict[str, Any] | None:
    """A Llama 3.x built-in tool's call, ``name.call(key=value, …)`` with literal values,
    as ``{"name": …, "arguments": {…}}``; None for anything else. The text is parsed, never
    evaluated (``ast.literal_eval`` on each value)."""
    try:
        node = python_text.parse(text.strip(), mode="eval").body
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "call"
            and isinstance(node.func.value, ast.Name)
            and not node.args
            and all(k.arg is not None for k in node.keywords)
        ):
            return None
        arguments = {str(k.arg): ast.literal_eval(k.value) for k in node.keywords}
        json.dumps(arguments)  # a tuple is a list in JSON; a set, bytes or complex are not JSON
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    return {"name": node.func.value.id, "arguments": arguments}


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None


def _bare_opening(text: str) -> str:
    """Whether a reply that begins with ``text`` opens like a bare call (an object, or a
    list of them): ``yes``, ``no``, or ``maybe`` (too little has come to tell)."""
    s = text.lstrip()
    if not s or "```json".startswith(s) or "```JSON".startswith(s):
        return "maybe"
    fence = _FENCE_OPEN.match(s)
    if fence is not None:
        s = s[fence.end() :]
    if not s:
        return "maybe"
    if s[0] == "[":  # a list: of calls if an object comes first
        s = s[1:].lstrip()
        return "maybe" if not s else "yes" if s[0] == "{" else "no"
    return "yes" if s[0] == "{" else "no"


def _partial_opener(text: str) -> int:
    """How many characters at the end of ``text`` may begin one of the ``OPENERS``."""
    for n in range(min(_LONGEST_OPENER - 1, len(text)), 0, -1):
        if any(o.startswith(text[-n:]) for o in OPENERS):
            return n
    return 0


class ToolCallScanner:
    """One streamed sample: ``push`` text as it comes and send what it returns as content;
    ``finish`` gives what is left to send as content and the calls."""

    def __init__(self, tools: Tools) -> None:
        self.tools = tools
        self.sent: list[str] = []  # the content sent so far, in pieces
        self.held: list[str] = []  # the text not sent yet
        self.holding = False  # a call may have begun: everything from here waits for the end

    def push(self, text: str) -> str:
        """What of the text so far may be sent as content now."""
        if self.holding:
            self.held.append(text)
            return ""
        text = "".join(self.held) + text  # a few characters (a tag's beginning, an opening)
        if not self.sent:
            opening = _bare_opening(text)
            if opening != "no":
                self.held, self.holding = [text], opening == "yes"
                return ""
        at, _ = first_opener(text)
        if at >= 0:
            self.held, self.holding = [text[at:]], True
            out = text[:at]
        else:
            keep = _partial_opener(text)
            self.held, out = [text[len(text) - keep :]], text[: len(text) - keep]
        if out:
            self.sent.append(out)
        return out

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The content not yet sent, and the calls (the held text, read at the end)."""
        sent, held = "".join(self.sent), "".join(self.held)
        self.held = []
        content, calls = self.tools.read(sent + held)
        if not calls or not (content or "").startswith(sent.rstrip()):  # sent text is no call's
            return held, []
        return (content or "")[len(sent) :], calls
