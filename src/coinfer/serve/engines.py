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
    session: Session,
    *,
    name: str,
    max_queue: int = 64,
    on_release: Callable[[], None] | None = None,
    lost_part: Callable[[], str | None] | None = None,
) -> Served:
    """``session`` served as ``name``; ``on_release``: what else to close when it stops;
    ``lost_part``: a line naming a part of its lost for good (a pipeline's device that
    died), or None: the server then answers 503 and ``/health`` says why."""
    chat: Any = session.parts.get("chat")
    out: Served
    if chat is not None:
        out = PlainServed(chat, name=name, max_queue=max_queue, session=session, on_release=on_release)
    elif isinstance(session, BatchSession) and session.batching:
        out = BatchServed(session, name=name, max_queue=max_queue, on_release=on_release)
    else:
        out = SessionServed(session, name=name, max_queue=max_queue, on_release=on_release)
    if lost_part is not None:
        out.lost_part = lost_part
    return out
