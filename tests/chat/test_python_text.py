"""The library's parses of Python text never run at once: CPython before 3.11.9 and
3.12.3 shares its AST constructor's state between threads (python/cpython#106905), and a
served MinionS request or tool call parses on a thread of its own."""

from __future__ import annotations

import ast
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from coinfer.chat import python_text


def test_parses_from_several_threads_never_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    inside, most = [0], [0]
    count = threading.Lock()
    real = ast.parse

    def slow_parse(text: str, *args: Any, **kwargs: Any) -> ast.AST:
        with count:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.01)  # long enough that unserialized parses from 4 threads would meet
        with count:
            inside[0] -= 1
        return real(text, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", slow_parse)
    texts = [f"x = {i}" for i in range(16)] + [f"{{'a': {i}}}" for i in range(16)]
    with ThreadPoolExecutor(4) as pool:
        trees = list(pool.map(python_text.parse, texts[:16]))
        values = list(pool.map(python_text.literal, texts[16:]))
    assert most[0] == 1
    assert [t.body[0].value.value for t in trees] == list(range(16))
    assert values == [{"a": i} for i in range(16)]


def test_literal_reads_literals_and_refuses_anything_else() -> None:
    assert python_text.literal("  [1, 'a', None]") == [1, "a", None]
    with pytest.raises(ValueError):
        python_text.literal("__import__('os')")
    assert isinstance(python_text.parse("f(x)", mode="eval"), ast.Expression)
