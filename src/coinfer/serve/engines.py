"""One served adapter for every engine (``coinfer serve --engine``): a ``Session`` opened
from the registry becomes a ``Served``. A session that batches joins requests to its
running batch (``BatchServed``); plain decoding or the speculative engine given a
``LocalChat`` (the part ``chat``) batches through it, samples and schemas included, the
speculative one drafting inside the batch (``PlainServed``); every other session
answers as many requests at once as its ``concurrent`` says (``SessionServed``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coinfer.decoding.engine import BatchSession, Session
from coinfer.serve.batched import BatchServed
from coinfer.serve.served import PlainServed, Served, SessionServed

__all__ = ["served"]


def served(
    session: Session, *, name: str, max_queue: int = 64, on_release: Callable[[], None] | None = None
) -> Served:
    """``session`` served as ``name``; ``on_release``: what else to close when it stops."""
    chat: Any = session.parts.get("chat")
    if chat is not None:
        return PlainServed(chat, name=name, max_queue=max_queue, session=session, on_release=on_release)
    if isinstance(session, BatchSession) and session.batching:
        return BatchServed(session, name=name, max_queue=max_queue, on_release=on_release)
    return SessionServed(session, name=name, max_queue=max_queue, on_release=on_release)
