"""DRAGON's session as a server opens it: ``max_batch`` questions answered at once on
one model shared by their threads, one at a time otherwise."""

from __future__ import annotations

from coinfer.engines.dragon import DragonConfig
from coinfer.engines.dragon.session import ENGINE
from coinfer.models.shared import SharedModel
from coinfer.testing import ScriptedModel


class _Corpus:
    def retrieve(self, *args: object, **kwargs: object) -> list[object]:
        return []


def test_a_session_answers_max_batch_questions_at_once_on_a_shared_model() -> None:
    model = ScriptedModel(lambda prefix: 97, n_ctx=128)
    parts = {"model": model, "corpus": _Corpus()}
    with ENGINE.open(parts, DragonConfig(max_batch=4)) as session:
        assert session.concurrent() == 4 and isinstance(session.model, SharedModel)
        assert session.model.model is model
    with ENGINE.open(parts, DragonConfig()) as session:
        assert session.concurrent() == 1 and session.model is model
