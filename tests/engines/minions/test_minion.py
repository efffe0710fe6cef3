"""Minion's free chat and the direct baselines against scripted models."""

from __future__ import annotations

import json

from coinfer.engines.minions import MinionConfig, direct, drive, minion
from coinfer.testing import ScriptedChat

DOC = "Release notes. Version 2.4 added the --fast flag. Version 2.5 removed Python 3.8 support."


def _ask(message: str) -> str:
    return json.dumps({"decision": "ask", "message": message})


def test_the_remote_asks_the_local_answers_from_the_document_and_the_remote_answers() -> None:
    remote_script = [_ask("Which version added --fast?"), json.dumps({"decision": "final", "answer": "2.4"})]
    remote = ScriptedChat(list(remote_script))
    local = ScriptedChat(lambda r: "Version 2.4 added the --fast flag.")
    run = drive("minion", minion("When was --fast added?", [("notes", DOC)]), local=local, remote=remote)
    assert run.finished.answer == "2.4" and run.finished.rounds == 1
    assert DOC in local.requests[0].messages[0]["content"]  # the local model holds the document
    assert "When was --fast added?" in local.requests[0].messages[-1]["content"]  # and the question
    drive(
        "minion",
        minion("When was 3.8 dropped?", [("notes", DOC)]),
        local=local,
        remote=ScriptedChat(remote_script),
    )
    assert local.requests[-1].messages[0] == local.requests[0].messages[0]  # one cached document prefix
    assert all(DOC not in m["content"] for r in remote.requests for m in r.messages)  # the remote never does
    assert "Local model: Version 2.4" in remote.requests[1].messages[-1]["content"]
    assert local.requests[0].messages[-1]["content"].endswith("\n\nWhich version added --fast?")


def test_the_remotes_opening_is_always_a_message_never_an_answer() -> None:
    """The remote has heard nothing from the documents yet: an opening that guesses is sent
    to the local model as a message, not returned as the answer (paper 000, D.1)."""
    remote = ScriptedChat(["10", json.dumps({"decision": "final", "answer": "2.4"})])
    local = ScriptedChat(lambda r: "Version 2.4 added the --fast flag.")
    run = drive("minion", minion("When was --fast added?", [("notes", DOC)]), local=local, remote=remote)
    assert run.finished.answer == "2.4" and local.requests[0].messages[-1]["content"].endswith("\n\n10")


def test_after_max_rounds_the_remote_must_answer() -> None:
    remote = ScriptedChat([_ask("q1"), _ask("q2"), json.dumps({"decision": "final", "answer": "2.5"})])
    run = drive(
        "minion",
        minion("When was 3.8 dropped?", [("notes", DOC)], MinionConfig(max_rounds=2)),
        local=ScriptedChat(lambda r: "2.5"),
        remote=remote,
    )
    assert run.finished.answer == "2.5" and run.finished.rounds == 2
    assert "ask" not in remote.requests[-1].messages[-1]["content"]  # the last turn may only answer
    assert run.usage("remote").calls == 3 and run.usage("local").calls == 2


def test_prose_is_a_message_in_the_chat_and_a_best_effort_answer_at_the_forced_end() -> None:
    remote = ScriptedChat(["just prose", "I believe 2.5"])
    local = ScriptedChat(lambda r: "2.5")
    run = drive(
        "minion", minion("q", [("notes", DOC)], MinionConfig(max_rounds=1)), local=local, remote=remote
    )
    assert local.requests[0].messages[-1]["content"].endswith("\n\njust prose")
    assert run.finished.answer == "I believe 2.5" and run.finished.best_effort


def test_direct_baselines_send_everything_to_one_side() -> None:
    remote = ScriptedChat(lambda r: " 2.4 ")
    run = drive("remote-only", direct("q", [("notes", DOC)], "remote"), local=None, remote=remote)
    assert run.finished.answer == "2.4" and DOC in remote.requests[0].messages[0]["content"]
    assert run.usage("local").calls == 0
