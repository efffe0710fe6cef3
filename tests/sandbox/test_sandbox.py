"""The sandbox: remote code runs, and hostile code gets nothing and leaves the host standing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coinfer import sandbox
from coinfer.errors import ConfigError, SandboxError

# A trusted module that hands out the real os, files, sockets and processes: what an escape
# from the first two layers would reach. The audit hook and the limits must still hold.
LEAKY = """
import os, socket, subprocess
def system(cmd): return os.system(cmd)
def popen(cmd): return subprocess.run(cmd, capture_output=True).stdout.decode()
def read(path): return open(path).read()
def write(path): open(path, "w").write("pwned")
def listdir(path): return os.listdir(path)
def connect(port): socket.create_connection(("127.0.0.1", port))
def fork(): return os.fork()
def kill(pid): os.kill(pid, 9)
def remove(path): os.remove(path)
def frame(gen): return gen.gi_frame.f_back
"""


def test_code_computes_from_its_inputs_and_returns_json() -> None:
    code = """
import re, json
words = re.findall(r"[a-z]+", text.lower())
print("counted", len(words))
result = {"n": len(words), "first": words[:2], "again": json.loads(json.dumps(words))[-1]}
"""
    out = sandbox.run(code, {"text": "The quick brown fox"})
    assert out.value == {"n": 4, "first": ["the", "quick"], "again": "fox"}
    assert out.stdout == "counted 4\n"


def test_trusted_modules_are_importable_and_classes_work() -> None:
    helpers = "def chunks(text, size):\n    return [text[i : i + size] for i in range(0, len(text), size)]\n"
    code = """
from dataclasses import dataclass
from helpers import chunks
@dataclass
class Job:
    chunk: str
    def as_dict(self): return {"chunk": self.chunk}
result = [Job(c).as_dict() for c in chunks(doc, 3)]
"""
    assert sandbox.run(code, {"doc": "abcdefg"}, modules={"helpers": helpers}).value == [
        {"chunk": "abc"},
        {"chunk": "def"},
        {"chunk": "g"},
    ]


def test_an_exception_comes_back_with_its_line() -> None:
    with pytest.raises(SandboxError) as err:
        sandbox.run("x = 1\ny = {}\nresult = y['missing']\n")
    assert err.value.kind == "error" and "KeyError" in str(err.value) and "line 3" in str(err.value)
    with pytest.raises(SandboxError, match="syntax error on line 1") as err:
        sandbox.run("def f(:\n")
    assert err.value.kind == "refused"
    with pytest.raises(SandboxError, match="JSON data"):
        sandbox.run("result = {1, 2}")


@pytest.mark.parametrize(
    "code",
    [
        "import os",
        "import subprocess\nsubprocess.run(['true'])",
        "import socket",
        "from os import system",
        "import ctypes",
        "import operator",  # attrgetter would reach any attribute by name
        "__import__('os').system('true')",
        "result = ().__class__.__bases__[0].__subclasses__()",
        "f = lambda: 0\nresult = f.__globals__",
        "def g():\n    yield 1\nresult = str(g().gi_frame.f_globals)",
        "try:\n    1 / 0\nexcept Exception as e:\n    t = e.__traceback__",
        "result = type.mro(type)",
        "result = __builtins__",
    ],
)
def test_escapes_are_refused_before_running(code: str) -> None:
    with pytest.raises(SandboxError) as err:
        sandbox.run(code)
    assert err.value.kind == "refused"


@pytest.mark.parametrize(
    "code",
    [
        "result = open('/etc/hostname').read()",
        "result = eval('1 + 1')",
        "exec('x = 1')",
        "result = getattr(1, 'real')",
        "result = globals()",
        "result = vars()",
        "import dataclasses\nresult = dataclasses.sys.modules",  # a module's modules are not in its view
        "import json\nresult = str(json.decoder)",
    ],
)
def test_dangerous_builtins_and_module_attributes_are_missing(code: str) -> None:
    with pytest.raises(SandboxError, match="NameError|AttributeError") as err:
        sandbox.run(code)
    assert err.value.kind == "error"


@pytest.mark.parametrize(
    ("call", "event"),
    [
        ("leaky.system('touch {canary}')", "os.system"),
        ("leaky.popen(['touch', '{canary}'])", "(subprocess.Popen|open)"),
        ("result = leaky.read('/etc/hostname')", "open"),
        ("leaky.write('{canary}')", "open"),
        ("result = leaky.listdir('/')", "os.listdir"),
        ("leaky.connect(9)", "(socket|import)"),  # a lazy import on the way is refused first
        ("leaky.fork()", "os.fork"),
        ("leaky.kill({pid})", "os.kill"),
        ("leaky.remove('{canary}')", "os.remove"),
        ("result = str(leaky.frame(x for x in [1]))", "object.__getattr__"),  # frames lead to real globals
    ],
)
def test_the_audit_hook_stops_files_processes_and_sockets_however_they_are_reached(
    call: str, event: str, tmp_path: Path
) -> None:
    canary = tmp_path / "canary"
    code = "import leaky\n" + call.format(canary=canary, pid=os.getpid())
    if "remove" in call:
        canary.write_text("keep me")
    with pytest.raises(SandboxError, match=f"does not allow '{event}") as err:  # the hook, not a NameError
        sandbox.run(code, modules={"leaky": LEAKY})
    assert err.value.kind == "error"
    assert canary.exists() == ("remove" in call)  # nothing created, nothing deleted


def test_an_infinite_loop_is_stopped_at_the_time_limit() -> None:
    with pytest.raises(SandboxError, match="time limit of 1 s") as err:
        sandbox.run("while True:\n    pass\n", timeout_s=1)
    assert err.value.kind == "timeout"


@pytest.mark.parametrize(
    "code",
    ["x = 'a' * (8 << 30)", "x = []\nwhile True:\n    x.append(' ' * (1 << 20))"],
)
def test_a_memory_bomb_is_stopped_at_the_memory_limit(code: str) -> None:
    with pytest.raises(SandboxError, match="memory limit of 128 MB") as err:
        sandbox.run(code, memory_mb=128, timeout_s=5)
    assert err.value.kind == "memory"


@pytest.mark.parametrize(
    "code", ["while True:\n    print('x' * 1000)", "result = 'x' * 2_000_000", "result = ['y'] * 1_000_000"]
)
def test_huge_output_is_cut_off(code: str) -> None:
    with pytest.raises(SandboxError, match="limit of 100000") as err:
        sandbox.run(code, output_limit=100_000, timeout_s=5)
    assert err.value.kind == "output"


def test_the_host_survives_a_barrage_and_still_runs_code() -> None:
    for code in ("while True:\n    pass", "x = 'a' * (8 << 30)", "import os", "1 / 0"):
        with pytest.raises(SandboxError):
            sandbox.run(code, timeout_s=1, memory_mb=128)
    assert sandbox.run("result = sum(range(10))").value == 45


def test_bad_limits_and_inputs_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        sandbox.run("result = 1", timeout_s=0)
    with pytest.raises(ConfigError, match="JSON"):
        sandbox.run("result = 1", {"x": object()})
