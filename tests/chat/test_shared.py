"""One local chat's batch shared by callers on several threads: each call gets the answers
it would get alone, and calls in flight at once share the model's forwards."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from coinfer.chat import ChatRequest, LocalChat, SharedChat
from coinfer.errors import ContextOverflowError, ModelError
from coinfer.testing import ScriptedModel

QUESTIONS = ["Name a river.", "Count to three.", "Say hi.", "What is two and two?"]


def _ask(text: str, max_tokens: int = 30) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], max_tokens=max_tokens)


class _Chatty(ScriptedModel):
    """A scripted model whose chat prompt is its messages' bytes."""

    def chat_prompt(self, messages: Any, *, add_generation_prompt: bool = True) -> list[int]:
        return self.tokenize("".join(m["content"] for m in messages))


def _model() -> ScriptedModel:
    return _Chatty(lambda prefix: 97 + (len(prefix) * 7 + sum(prefix[-3:])) % 26, n_ctx=256)


def _rows_per_forward(model: ScriptedModel) -> list[int]:
    """The sequences every batched forward carried (patched onto ``model``)."""
    rows: list[int] = []
    many: Callable[..., Any] = model._many

    def counting(items: Any, what: str, run: Any) -> Any:
        rows.append(len(items))
        return many(items, what, run)

    model._many = counting  # type: ignore[method-assign]
    return rows


def test_calls_from_several_threads_join_one_batch_and_answer_as_alone() -> None:
    alone_model = _model()
    with LocalChat(alone_model, max_concurrent=4, keep=0) as chat:
        alone = [chat.chat(_ask(q)).text for q in QUESTIONS]

    model = _model()
    rows = _rows_per_forward(model)
    local = LocalChat(model, max_concurrent=4, keep=0)
    shared = SharedChat(local)
    go, stepped = threading.Event(), local.step

    def held_step(*args: Any) -> Any:  # the first step waits until every call has arrived
        go.wait(10)
        return stepped(*args)

    local.step = held_step  # type: ignore[method-assign]
    answers: dict[int, str] = {}

    def ask(i: int) -> None:
        answers[i] = shared.chat(_ask(QUESTIONS[i])).text

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(QUESTIONS))]
    threads[0].start()
    time.sleep(0.2)  # the first call is in the batch, its step held
    for t in threads[1:]:
        t.start()
    deadline = time.monotonic() + 10
    while shared._inbox.qsize() < len(QUESTIONS) - 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    go.set()  # the others join the running batch at its next step
    for t in threads:
        t.join(30)
    shared.close()
    local.close()
    assert [answers[i] for i in range(len(QUESTIONS))] == alone  # each its own answer
    assert max(rows) == len(QUESTIONS)  # all four decoded in one forward
    assert model.live_sequences == 0


def test_a_call_that_does_not_fit_fails_alone_and_a_closed_batch_says_so() -> None:
    model = _model()
    local = LocalChat(model, max_concurrent=2, keep=0)
    shared = SharedChat(local)
    with pytest.raises(ContextOverflowError):
        shared.chat(_ask("x" * 400))
    assert shared.chat(_ask("Say hi.", max_tokens=4)).text  # the next call is answered
    shared.close()
    with pytest.raises(ModelError, match="stopped"):
        shared.chat(_ask("Say hi."))
    local.close()
    assert model.live_sequences == 0


def _ask_and_note(shared: SharedChat, outcomes: list[str]) -> None:
    try:
        shared.chat(_ask("Count to three.", max_tokens=8))
        outcomes.append("answered")
    except ModelError:
        outcomes.append("closed")


def test_calls_racing_a_close_each_get_an_answer_or_an_error_and_none_hangs() -> None:
    """Calls made from threads while another thread closes the shared batch: each returns,
    answered or told the batch closed; no call waits for ever (a call that went in just
    before the sign to stop was once left in the inbox)."""
    for _ in range(5):
        model = _model()
        local = LocalChat(model, max_concurrent=4, keep=0)
        shared = SharedChat(local)
        outcomes: list[str] = []
        threads = [threading.Thread(target=_ask_and_note, args=(shared, outcomes)) for _ in range(8)]
        for t in threads:
            t.start()
        shared.close()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads) and len(outcomes) == 8
        local.close()
        assert model.live_sequences == 0
