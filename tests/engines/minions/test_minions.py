"""MinionS against scripted models and the real sandbox: the protocol's contract, its
accounting, and its behaviour when either model misbehaves."""

from __future__ import annotations

import json

import pytest

from coinfer.chat import ChatRequest
from coinfer.engines.minions import MinionsConfig, drive, minions
from coinfer.engines.minions.minions import cited_from, findings, mentions, parse_job_output, supported
from coinfer.errors import ConfigError
from coinfer.testing import ScriptedChat

DOC = "\n\n".join(
    [
        "The server section describes networking.",
        "The default port is 8080 unless PORT is set.",
        "Logging goes to stderr.",
        "Timeouts default to thirty seconds.",
    ]
)
QUESTION = "What is the default port?"

GOOD_CODE = """```python
def prepare_jobs(documents, last_jobs, last_outputs):
    jobs = []
    for doc in documents:
        for chunk in chunk_by_paragraphs(doc.text, max_chars=50):
            jobs.append(JobManifest(chunk=chunk, task="Find the default port.", doc=doc.name))
    return jobs
```"""


def final_reply(answer: str) -> str:
    return json.dumps({"decision": "final", "answer": answer})


def local_reader(request: ChatRequest) -> str:
    """A local model that answers when its excerpt has the port and abstains otherwise."""
    text = request.messages[-1]["content"]
    if "8080" in text:
        return json.dumps({"explanation": "stated", "citation": "The default port is 8080", "answer": "8080"})
    return json.dumps({"explanation": "not in this excerpt", "citation": None, "answer": None})


def _remote(*replies: str) -> ScriptedChat:
    return ScriptedChat(list(replies), name="remote")


def _contents(model: ScriptedChat) -> str:
    return "\n".join(m["content"] for r in model.requests for m in r.messages)


def test_one_round_decomposes_executes_in_one_batch_and_aggregates() -> None:
    remote, local = _remote(GOOD_CODE, final_reply("8080")), ScriptedChat(local_reader)
    run = drive("minions", minions(QUESTION, [("config.md", DOC)]), local=local, remote=remote)
    assert run.finished.answer == "8080" and run.finished.rounds == 1 and not run.finished.best_effort
    assert local.batches == [4]  # the four paragraph jobs went to the local model together
    aggregate = remote.requests[1].messages[-1]["content"]
    assert "8080" in aggregate and "not in this excerpt" not in aggregate  # abstentions filtered
    assert DOC not in _contents(remote)  # the remote never reads the document
    assert run.usage("remote").calls == 2 and run.usage("local").calls == 4
    assert run.usage("remote").prompt_tokens == sum(
        len(m["content"].split()) for r in remote.requests for m in r.messages
    )
    notes = {e["event"]: e["data"] for e in run.trace if e["event"] in ("jobs", "abstentions")}
    assert notes["jobs"]["jobs"] == 4 and notes["abstentions"] == {
        "answered": 1,
        "abstained": 3,
        "invalid_json": 0,
        "unverified": 0,
    }


def test_code_that_raises_goes_back_to_the_remote_with_the_error() -> None:
    broken = "```python\ndef prepare_jobs(documents, last_jobs, last_outputs):\n    return 1 / 0\n```"
    remote = _remote(broken, GOOD_CODE, final_reply("8080"))
    run = drive("minions", minions(QUESTION, [("d", DOC)]), local=ScriptedChat(local_reader), remote=remote)
    assert run.finished.answer == "8080" and not run.finished.best_effort
    fix = remote.requests[1].messages[-1]["content"]
    assert "ZeroDivisionError" in fix and "line 2" in fix


def test_decorations_the_sandbox_lacks_are_tidied_away_not_paid_for_with_retries() -> None:
    """The 1.5B remote imports the module its document describes, and typing for its hints."""
    decorated = (
        "```python\nimport gzip\nfrom typing import List\n\n"
        "def prepare_jobs(documents: List[Document], last_jobs, last_outputs) -> List[JobManifest]:\n"
        "    jobs: List[JobManifest] = [JobManifest(chunk=c, task='Which port?', doc=d.name)\n"
        "        for d in documents for c in chunk_by_paragraphs(d.text, 3000)]\n"
        "    return jobs\n```"
    )
    remote = _remote(decorated, final_reply("8080"))
    run = drive("minions", minions(QUESTION, [("d", DOC)]), local=ScriptedChat(local_reader), remote=remote)
    assert run.finished.answer == "8080" and not run.finished.best_effort
    assert [r.messages[-1]["content"][:8] for r in remote.requests][1].startswith("Question")  # no fix asked
    tidied = next(e["data"]["changes"] for e in run.trace if e["event"] == "code tidied")
    assert "unused import of gzip" in tidied and "unused import of typing" in tidied


def test_code_without_prepare_jobs_goes_back_saying_so() -> None:
    remote = _remote(
        "```python\nclass CookieError(Exception):\n    pass\n```", GOOD_CODE, final_reply("8080")
    )
    run = drive("minions", minions(QUESTION, [("d", DOC)]), local=ScriptedChat(local_reader), remote=remote)
    assert run.finished.answer == "8080" and not run.finished.best_effort
    assert "does not define prepare_jobs" in remote.requests[1].messages[-1]["content"]


def test_code_that_keeps_failing_falls_back_to_default_jobs_marked_best_effort() -> None:
    hostile = "```python\nimport os\ndef prepare_jobs(documents, *_):\n    os.system('true')\n```"
    config = MinionsConfig(code_retries=1)
    remote = _remote(hostile, "no code, sorry", final_reply("8080"))
    run = drive(
        "minions", minions(QUESTION, [("d", DOC)], config), local=ScriptedChat(local_reader), remote=remote
    )
    assert run.finished.answer == "8080" and run.finished.best_effort
    assert "default jobs" in run.finished.problems[0] and "no ```python block" in run.finished.problems[0]
    refused = [e for e in run.trace if e["event"] == "code"]
    assert refused[0]["kind"] == "refused"


def test_invalid_local_json_is_retried_once_then_counted_as_an_abstention() -> None:
    calls: list[int] = []

    def sloppy(request: ChatRequest) -> str:
        calls.append(len(request.messages))
        if "That was not one valid JSON object" in request.messages[-1]["content"]:
            return "still prose"
        if "8080" in request.messages[-1]["content"]:
            return "Sure! The port is 8080."  # prose, not JSON
        return local_reader(request)

    remote = _remote(GOOD_CODE, final_reply("unknown"))
    run = drive("minions", minions(QUESTION, [("d", DOC)]), local=ScriptedChat(sloppy), remote=remote)
    assert run.finished.answer == "unknown"
    note = next(e["data"] for e in run.trace if e["event"] == "abstentions")
    assert note == {"answered": 0, "abstained": 4, "invalid_json": 1, "unverified": 0}
    assert calls.count(4) == 1  # exactly one retry (system, user, assistant, user)


def test_remote_prose_instead_of_a_decision_is_retried_then_taken_as_a_best_effort() -> None:
    remote = _remote(GOOD_CODE, "I think it is 8080.", "It is 8080, as I said.")
    run = drive("minions", minions(QUESTION, [("d", DOC)]), local=ScriptedChat(local_reader), remote=remote)
    assert run.finished.answer == "It is 8080, as I said." and run.finished.best_effort
    assert "prose" in run.finished.problems[0]


@pytest.mark.parametrize("mode", ["scratchpad", "retry"])
def test_a_second_round_sees_the_last_jobs_and_the_carried_context(mode: str) -> None:
    zoom = """```python
def prepare_jobs(documents, last_jobs, last_outputs):
    hits = [job for job, out in zip(last_jobs, last_outputs) if out.answer]
    return [JobManifest(chunk=job.chunk, task="Which variable overrides the port?") for job in hits]
```"""
    more = json.dumps({"decision": "more", "missing": "the override variable", "notes": "port is 8080"})
    remote = _remote(GOOD_CODE, more, zoom, final_reply("8080, or PORT"))
    local = ScriptedChat(local_reader)
    config = MinionsConfig(max_rounds=2, round_context=mode)  # type: ignore[arg-type]
    run = drive("minions", minions(QUESTION, [("d", DOC)], config), local=local, remote=remote)
    assert run.finished.answer == "8080, or PORT" and run.finished.rounds == 2
    assert local.batches == [4, 1]  # round 2 zoomed in on the one chunk that answered
    second = remote.requests[2].messages[-1]["content"]
    assert "the override variable" in second
    assert ("port is 8080" in second) == (mode == "scratchpad")
    last = remote.requests[3].messages[-1]["content"]
    assert "last round" in last


def test_job_output_parsing_and_findings() -> None:
    assert parse_job_output('```json\n{"explanation": "x", "citation": null, "answer": "N/A"}\n```') == {
        "explanation": "x",
        "citation": None,
        "answer": None,
    }
    assert parse_job_output("{'explanation': 'y', 'citation': 'c', 'answer': 42}")["answer"] == "42"  # type: ignore[index]
    assert parse_job_output("no json here") is None
    job = {"task_id": 0, "task": "t", "doc": "d", "chunk_id": 3}
    out = {"explanation": "e", "citation": "c", "answer": "A"}
    text = findings([(job, out), ({**job, "chunk_id": 5}, out)])
    assert text.count("- A") == 1 and "(chunks 3, 5)" in text  # identical answers merged
    other = {**job, "doc": "e", "chunk_id": 7}
    assert '"d" chunk 3' in findings([(job, out), (other, {**out, "answer": "B"})])  # several documents


def test_bad_knobs_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        MinionsConfig(max_rounds=0)
    with pytest.raises(ConfigError):
        MinionsConfig(round_context="forget")  # type: ignore[arg-type]


def test_an_answer_without_a_real_quote_from_its_chunk_is_marked_for_the_remote() -> None:
    """A small local model that answers "10" everywhere, citing the document's name."""

    def inventive(request: ChatRequest) -> str:
        if "8080" in request.messages[-1]["content"]:
            return json.dumps({"explanation": "x", "citation": "default port is 8080", "answer": "8080"})
        return json.dumps({"explanation": "x", "citation": "config.md", "answer": "10"})

    remote = _remote(GOOD_CODE, final_reply("8080"))
    run = drive(
        "minions", minions(QUESTION, [("config.md", DOC)]), local=ScriptedChat(inventive), remote=remote
    )
    note = next(e["data"] for e in run.trace if e["event"] == "abstentions")
    assert note == {"answered": 4, "abstained": 0, "invalid_json": 0, "unverified": 3}
    lines = remote.requests[1].messages[-1]["content"].splitlines()
    assert any(ln.startswith('- 8080 (chunk 1) | quote: "default port is 8080"') for ln in lines)
    assert "- (1 other answer(s), from 3 excerpt(s), left out: found in none of their excerpts)" in lines
    assert "config.md" not in remote.requests[1].messages[-1]["content"].split("Task 1")[1]
    assert run.finished.answer == "8080" and not run.finished.best_effort  # a quoted answer backs it


def test_an_answer_no_quoted_local_answer_backs_is_flagged_not_silent() -> None:
    """The remote sides with the unquoted majority: the answer comes back marked, with why."""

    def inventive(request: ChatRequest) -> str:
        if "8080" in request.messages[-1]["content"]:
            return json.dumps({"explanation": "x", "citation": "default port is 8080", "answer": "8080"})
        return json.dumps({"explanation": "x", "citation": "config.md", "answer": "10"})

    run = drive(
        "minions",
        minions(QUESTION, [("config.md", DOC)]),
        local=ScriptedChat(inventive),
        remote=_remote(GOOD_CODE, final_reply("10")),
    )
    assert run.finished.answer == "10" and run.finished.best_effort
    assert any("no local answer that quoted its excerpt" in p for p in run.finished.problems)
    assert supported("Port 8080", ["8080"]) and supported("8080", ["the port is 8080"])
    assert not supported("10", ["8080"]) and not supported("", ["8080"]) and not supported("10", [])


def test_answers_found_in_none_of_their_excerpts_are_left_out_when_another_is_backed() -> None:
    job = {"task_id": 0, "task": "t", "doc": "d"}
    found = {
        "explanation": "",
        "citation": None,
        "answer": "IllegalMonthError",
        "in_excerpt": True,
        "unverified": True,
    }
    invented = {
        "explanation": "",
        "citation": "x",
        "answer": "ValueError",
        "in_excerpt": False,
        "unverified": True,
    }
    answered = [({**job, "chunk_id": i}, invented) for i in range(2, 10)]
    text = findings([({**job, "chunk_id": 0}, found), *answered])
    assert "- IllegalMonthError (chunk 0)" in text and "ValueError" not in text
    assert "1 other answer(s), from 8 excerpt(s), left out" in text
    assert "- ValueError (chunks 2, 3" in findings(answered)  # nothing backed: everything shown


def test_a_real_quote_that_does_not_hold_the_answer_backs_nothing() -> None:
    """The 0.5B model answered "c" for shlex's comment character, citing the word "shlex"."""

    def evasive(request: ChatRequest) -> str:
        if "8080" in request.messages[-1]["content"]:
            return json.dumps({"explanation": "x", "citation": "The default port", "answer": "80"})
        return json.dumps({"explanation": "x", "citation": None, "answer": None})

    remote = _remote(GOOD_CODE, final_reply("80"))
    run = drive("minions", minions(QUESTION, [("d", DOC)]), local=ScriptedChat(evasive), remote=remote)
    assert "80 (chunk 1) | no quote; in the text of 1 of its 1" in remote.requests[1].messages[-1]["content"]
    assert run.finished.best_effort  # no quote holds "80"


def test_an_answer_is_mentioned_whole_or_word_for_word() -> None:
    assert mentions("raise IllegalMonthError(month)", "IllegalMonthError")
    assert mentions("help='spacing between months (default 6)'", "6")
    assert mentions("the BadGzipFile exception", "`BadGzipFile` exception.")
    assert not mentions("raise ValueError", "IllegalMonthError") and not mentions(None, "x")
    assert not mentions("The default port", "80")
    assert mentions("placeholder=' [...]'", "The placeholder string ' [...]' is appended to the last line")


def test_citations_match_up_to_case_spacing_quotes_and_ellipses() -> None:
    chunk = "The default   port is 8080\nunless PORT is set."
    assert cited_from('"the default port is 8080 unless PORT"', chunk)
    assert cited_from("default port ... unless PORT is set", chunk)
    assert not cited_from("the port is 9090", chunk)
    assert not cited_from(None, chunk) and not cited_from("", chunk)
