"""MinionS (paper 000, §5): decompose on the remote, execute locally in parallel, aggregate.

Each round:

1. **Decompose.** The remote, which never sees the documents, writes
   ``prepare_jobs(documents, last_jobs, last_outputs)`` against the job API
   (``job_api``); the code, tidied of annotations and unused imports the sandbox lacks
   (``code_tidy``), runs in the sandbox over the documents. A reply without code, or
   code the sandbox refuses or that raises, goes back to the remote with the error,
   up to ``code_retries`` times; then the round runs default jobs (every chunk of
   ``chunk_chars`` characters with the question as the task) and the answer is marked a
   best effort.
2. **Execute.** Every job (``samples_per_task`` samples each) goes to the local model in
   one concurrent batch, with the instruction to answer JSON
   ``{explanation, citation, answer}`` or abstain (``answer`` null). A reply that is not
   such JSON is asked for again once, all of them in one batch; if it still is not, the
   job counts as abstained: one bad local reply never aborts the run. With
   ``verify_citations``, an answer is *quoted* only if its citation is words of its chunk
   that hold the answer, and each answer notes whether its chunk holds it at all: small
   models invent answers more often than quotes, yet also often answer right without one.
3. **Aggregate.** Abstentions are dropped; the rest, grouped by task, identical answers
   merged, backed ones first, and those found in no chunk left out where another answer
   is backed (``findings``), go to the remote, which answers (``{"decision": "final", "answer"}``)
   or asks for another round (``{"decision": "more", "missing", "notes"}``). In the last
   round it must answer. A reply that is not JSON is asked for again once, then taken as
   the answer, marked as a best effort.

Between rounds the remote keeps either a ``scratchpad`` (its notes and what is missing,
accumulated) or, with ``retry``, only its advice on what is missing (§5.1).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from coinfer.engines.minions import job_api, prompts
from coinfer.engines.minions.code_tidy import tidy_job_code
from coinfer.engines.minions.parsing import json_object, python_code
from coinfer.engines.minions.protocol import ChatCall, CodeRun, Finished, Note, Protocol
from coinfer.errors import ConfigError, SandboxError
from coinfer.sandbox import DEFAULT_MODULES

__all__ = ["MinionsConfig", "minions"]

# Appended to the remote's code: the job API's names, then the call whose value comes back.
CALL_PREPARE_JOBS = """

from minions import (JobManifest, JobOutput, Document, chunk_by_chars, chunk_by_paragraphs,
    chunk_by_pages, chunk_by_code_blocks, chunk_by_sections)
import minions
result = minions.collect_jobs(prepare_jobs, documents, last_jobs, last_outputs)
"""

JOB_CODE_MODULES = (*DEFAULT_MODULES, "minions")  # what the job code may import in the sandbox

ABSTAIN_WORDS = {"", "none", "null", "n/a", "na", "unknown", "not found", "not mentioned", "not specified"}


@dataclass(frozen=True, kw_only=True)
class MinionsConfig:
    """The paper's knobs: tasks per round, samples per task, chunk size, rounds, round context."""

    name: ClassVar[str] = "minions"
    max_rounds: int = 2
    tasks_per_round: int = 3
    samples_per_task: int = 1
    chunk_chars: int = 3000
    round_context: Literal["scratchpad", "retry"] = "scratchpad"
    code_retries: int = 2
    job_max_tokens: int = 192
    verify_citations: bool = True  # answers whose citation is not in their chunk are marked so

    def __post_init__(self) -> None:
        if min(self.max_rounds, self.tasks_per_round, self.samples_per_task, self.job_max_tokens) < 1:
            raise ConfigError(
                "MinionS needs max_rounds, tasks_per_round, samples_per_task, job_max_tokens >= 1",
                hint="pass --max-rounds, --tasks-per-round and --samples-per-task of at least 1",
            )
        if self.chunk_chars < 200 or self.code_retries < 0:
            raise ConfigError(
                f"MinionS needs chunk_chars >= 200 and code_retries >= 0, got {self.chunk_chars}, "
                f"{self.code_retries}",
                hint="pass --chunk-chars N with N >= 200",
            )
        if self.round_context not in ("scratchpad", "retry"):
            raise ConfigError(f"round_context must be 'scratchpad' or 'retry', got {self.round_context!r}")

    def protocol(self, question: str, documents: Sequence[tuple[str, str]]) -> Protocol:
        return minions(question, documents, self)


def minions(
    question: str,
    documents: Sequence[tuple[str, str]],
    config: MinionsConfig = MinionsConfig(),  # noqa: B008
) -> Protocol:
    context, problems, notes, quoted = "", list[str](), list[str](), list[str]()
    last_jobs: list[dict[str, Any]] = []
    last_outputs: list[dict[str, Any]] = []
    for rnd in range(1, config.max_rounds + 1):
        jobs = yield from _prepare_jobs(
            rnd, question, documents, context, last_jobs, last_outputs, config, problems
        )
        yield Note(
            rnd,
            "jobs",
            {
                "jobs": len(jobs),
                "tasks": sorted({j["task"] for j in jobs}),
                "chunks": len({j["chunk_id"] for j in jobs}),
            },
        )
        outputs = yield from _execute(rnd, jobs, config)
        answered = [
            (job, out)
            for job, outs in zip(jobs, outputs, strict=True)
            for out in outs
            if out["answer"] is not None
        ]
        invalid = sum(out.get("invalid", False) for outs in outputs for out in outs)
        unverified = sum(out.get("unverified", False) for outs in outputs for out in outs)
        total = sum(len(outs) for outs in outputs)
        yield Note(
            rnd,
            "abstentions",
            {
                "answered": len(answered),
                "abstained": total - len(answered),
                "invalid_json": invalid,
                "unverified": unverified,
            },
        )
        quoted += [out["answer"] for _, out in answered if not out.get("unverified")]
        decision = yield from _aggregate(rnd, question, context, answered, rnd == config.max_rounds, problems)
        if decision["decision"] == "final":
            if config.verify_citations and not supported(decision["answer"], quoted):
                problems.append(
                    "no local answer that quoted its excerpt agrees with this answer: it rests on "
                    "claims the local model could not show in the documents' words; check it"
                )
            return Finished(decision["answer"], rnd, best_effort=bool(problems), problems=problems)
        if config.round_context == "scratchpad" and str(decision.get("notes") or "").strip():
            notes.append(str(decision["notes"]).strip())
        context = _round_context(notes, str(decision.get("missing") or "").strip())
        last_jobs = jobs
        last_outputs = [{k: outs[0][k] for k in ("explanation", "citation", "answer")} for outs in outputs]
    raise AssertionError("the last round always answers")  # pragma: no cover


def _prepare_jobs(
    rnd: int,
    question: str,
    documents: Sequence[tuple[str, str]],
    context: str,
    last_jobs: list[dict[str, Any]],
    last_outputs: list[dict[str, Any]],
    config: MinionsConfig,
    problems: list[str],
) -> Any:
    """Jobs from the remote's code, or the default jobs when its code keeps failing."""
    request = prompts.decompose_request(
        question, documents, context, chunk_chars=config.chunk_chars, tasks=config.tasks_per_round
    )
    inputs = {
        "documents": [{"name": n, "text": t} for n, t in documents],
        "last_jobs": last_jobs,
        "last_outputs": last_outputs,
    }
    error = ""
    for attempt in range(config.code_retries + 1):
        [reply] = yield ChatCall("remote", rnd, "decompose" if attempt == 0 else "fix code", [request])
        code = python_code(reply.text)
        tidy = tidy_job_code(code, JOB_CODE_MODULES) if code is not None else None
        if tidy is None:
            error = "the reply has no ```python block"
        elif tidy.problem:
            error = tidy.problem
        else:
            if tidy.changes:
                yield Note(rnd, "code tidied", {"changes": list(tidy.changes)})
            out = yield CodeRun(rnd, tidy.code + CALL_PREPARE_JOBS, inputs)
            if not isinstance(out, SandboxError):
                return out.value
            error = str(out)
        request = prompts.code_fix_request(request, reply.text, error)
    problems.append(
        f"round {rnd}: the remote's job code failed {config.code_retries + 1} times (last: {error}); "
        "default jobs were run instead"
    )
    return default_jobs(question, documents, config.chunk_chars)


def default_jobs(
    question: str, documents: Sequence[tuple[str, str]], chunk_chars: int
) -> list[dict[str, Any]]:
    """Every chunk of every document with the question itself as the task."""

    def prepare(docs: list[job_api.Document], *_: Any) -> list[job_api.JobManifest]:
        return [
            job_api.JobManifest(chunk=c, task=question, doc=d.name)
            for d in docs
            for c in job_api.chunk_by_paragraphs(d.text, chunk_chars)
        ][: job_api.MAX_JOBS]

    return job_api.collect_jobs(prepare, [{"name": n, "text": t} for n, t in documents], [], [])


def _execute(rnd: int, jobs: list[dict[str, Any]], config: MinionsConfig) -> Any:
    """Each job's parsed samples; an invalid reply is asked for once more, then abstains."""
    requests = [
        prompts.job_request(
            j["chunk"],
            j["task"],
            j["advice"],
            samples=config.samples_per_task,
            max_tokens=config.job_max_tokens,
        )
        for j in jobs
    ]
    results = yield ChatCall("local", rnd, "jobs", requests)
    outputs = [[parse_job_output(t) for t in r.texts] for r in results]
    redo = [(i, s) for i, outs in enumerate(outputs) for s, out in enumerate(outs) if out is None]
    if redo:
        retries = [prompts.json_retry_request(requests[i], results[i].texts[s]) for i, s in redo]
        again = yield ChatCall("local", rnd, "jobs: retry invalid JSON", retries)
        for (i, s), result in zip(redo, again, strict=True):
            outputs[i][s] = parse_job_output(result.text) or {
                "explanation": "no valid JSON after a retry",
                "citation": None,
                "answer": None,
                "invalid": True,
            }
    if config.verify_citations:
        for job, outs in zip(jobs, outputs, strict=True):
            for out in outs:
                if out is not None and out["answer"] is not None:
                    _check_backing(out, job["chunk"])
    return outputs


def _check_backing(out: dict[str, Any], chunk: str) -> None:
    """Mark an answer ``unverified`` unless its citation is words of the chunk that hold the
    answer, and note whether the chunk holds the answer at all (``in_excerpt``)."""
    citation, answer = out["citation"], out["answer"]
    out["unverified"] = not (cited_from(citation, chunk) and mentions(citation, answer))
    out["in_excerpt"] = mentions(chunk, answer)


def cited_from(citation: str | None, chunk: str) -> bool:
    """Whether the citation is words of the chunk (case, spacing, quotes and ellipses aside):
    an answer without a real quote is most often a small model's invention."""
    if not citation:
        return False
    pieces = [_normalized(p) for p in re.split(r"\.\.\.|…", citation)]
    text = _normalized(chunk)
    return any(pieces) and all(p in text for p in pieces if len(p) >= 3)


def mentions(text: str | None, answer: str) -> bool:
    """Whether ``text`` holds the answer: all of it (case, spacing and quotes aside), every
    quoted fragment of it (``The placeholder ' [...]' is appended``), or every word of it."""
    mine = _normalized(answer).strip(".")
    if not text or not mine:
        return False
    haystack = _normalized(text)
    if mine in haystack:
        return True
    quoted = ["".join(groups).strip() for groups in re.findall(r"'([^']+)'|\"([^\"]+)\"|`([^`]+)`", mine)]
    if any(quoted) and all(f in haystack for f in quoted if f):
        return True
    words = re.findall(r"\w+", mine)
    return bool(words) and set(words) <= set(re.findall(r"\w+", haystack))


def supported(answer: str, quoted: Sequence[str]) -> bool:
    """Whether a local answer backed by a real quote agrees with ``answer`` (one holds the other)."""
    mine = _normalized(answer)
    return bool(mine) and any(q and (q in mine or mine in q) for q in map(_normalized, quoted))


def _normalized(text: str) -> str:
    return " ".join(text.lower().strip().strip("\"'`").split())


def parse_job_output(text: str) -> dict[str, Any] | None:
    """``{explanation, citation, answer}`` from a local reply (answer None: abstained), or None
    when the reply holds no such JSON object."""
    obj = json_object(text)
    if obj is None or not {"explanation", "answer"} <= obj.keys():
        return None
    answer = obj.get("answer")
    if isinstance(answer, (list, dict)):
        answer = str(answer)
    answer = (
        None if answer is None or str(answer).strip().lower().rstrip(".") in ABSTAIN_WORDS else str(answer)
    )
    citation = obj.get("citation")
    return {
        "explanation": str(obj.get("explanation") or ""),
        "citation": None if citation in (None, "") else str(citation),
        "answer": answer,
    }


def findings(answered: list[tuple[dict[str, Any], dict[str, Any]]]) -> str:
    """The answered jobs for the remote, by task, identical answers merged, long fields cut.

    Small local models answer every excerpt, most often citing words that are not in it.
    So each answer says what backs it: a real quote that holds it, or else in how many of
    its excerpts the answer's words occur at all; an invented citation is not passed on.
    Answers with quotes come first, then those found in more excerpts. Where some answer
    to a task is backed, the answers found in none of their excerpts are left out, counted
    (the remote model, like the local one, otherwise favours the answer that echoes the
    question or its own prior: calendar's ``ValueError`` from 8 excerpts that never say it,
    over ``IllegalMonthError`` from the 2 that define it). Document names appear only when
    the jobs span several documents."""
    by_task: dict[int, tuple[str, dict[str, list[tuple[dict[str, Any], dict[str, Any]]]]]] = {}
    for job, out in answered:
        task, answers = by_task.setdefault(job["task_id"], (job["task"], {}))
        answers.setdefault(out["answer"].strip(), []).append((job, out))
    several_docs = len({job["doc"] for job, _ in answered}) > 1
    lines = []
    for number, (task, answers) in enumerate(by_task.values(), 1):
        lines.append(f"Task {number}: {task}")
        ranked = sorted(answers.items(), key=lambda kv: _strength(kv[1]), reverse=True)
        backed = [(a, hits) for a, hits in ranked if _strength(hits)[:2] != (0, 0)]
        for answer, hits in backed or ranked:
            lines.append(f"- {_cut(answer, 300)} {_where(hits, several_docs)}{_support(hits)}")
        if backed and len(backed) < len(ranked):
            unbacked = sum(len(hits) for _, hits in ranked[len(backed) :])
            lines.append(
                f"- ({len(ranked) - len(backed)} other answer(s), from {unbacked} excerpt(s), left out: "
                "found in none of their excerpts)"
            )
    return "\n".join(lines)


Hits = list[tuple[dict[str, Any], dict[str, Any]]]


def _quoted_hits(hits: Hits) -> list[dict[str, Any]]:
    return [out for _, out in hits if out["citation"] and not out.get("unverified")]


def _strength(hits: Hits) -> tuple[int, int, int]:
    """How well an answer is backed: quotes, then excerpts that hold it, then excerpts."""
    return len(_quoted_hits(hits)), sum(bool(o.get("in_excerpt")) for _, o in hits), len(hits)


def _where(hits: Hits, several_docs: bool) -> str:
    if several_docs:
        return "(" + ", ".join(sorted({f'"{j["doc"]}" chunk {j["chunk_id"]}' for j, _ in hits})) + ")"
    ids = sorted({j["chunk_id"] for j, _ in hits})
    return f"(chunk{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))})"


def _support(hits: Hits) -> str:
    """The quote behind an answer, or else how many of its excerpts hold it; then its
    explanation."""
    quoted = _quoted_hits(hits)
    out = quoted[0] if quoted else hits[0][1]
    if quoted:
        backing = f' | quote: "{_cut(out["citation"], 200)}"'
    elif any("in_excerpt" in o for _, o in hits):
        found = sum(bool(o.get("in_excerpt")) for _, o in hits)
        backing = f" | no quote; in the text of {found} of its {len(hits)} excerpt(s)"
    else:
        backing = " | no quote"
    explanation = _cut(out["explanation"], 150)
    return backing + (f" | {explanation}" if explanation else "")


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _aggregate(
    rnd: int, question: str, context: str, answered: list[Any], last: bool, problems: list[str]
) -> Any:
    """The remote's decision: {"decision": "final", "answer"} or {"decision": "more", …}."""
    request = prompts.aggregate_request(question, context, findings(answered), last=last)
    [reply] = yield ChatCall("remote", rnd, "aggregate", [request])
    decision = json_object(reply.text)
    if decision is None or decision.get("decision") not in ("final", "more"):
        [reply] = yield ChatCall(
            "remote", rnd, "aggregate: retry JSON", [prompts.json_retry_request(request, reply.text)]
        )
        decision = json_object(reply.text)
    if decision is None or decision.get("decision") not in ("final", "more"):
        problems.append(
            f"round {rnd}: the remote answered prose instead of its JSON decision twice; "
            "its text is taken as the answer"
        )
        return {"decision": "final", "answer": reply.text.strip()}
    if decision["decision"] == "final" or last:
        answer = decision.get("answer")
        if not answer:
            problems.append(f"round {rnd}: the remote gave no answer; its notes stand in for one")
            answer = decision.get("notes") or decision.get("missing") or reply.text.strip()
        return {"decision": "final", "answer": str(answer)}
    return decision


def _round_context(notes: list[str], missing: str) -> str:
    """What the remote carries into the next round: the scratchpad's notes so far (none
    with ``retry``) and its latest advice on what is missing."""
    parts = ["Scratchpad (what earlier rounds found):" + "".join(f"\n- {n}" for n in notes)] if notes else []
    if missing:
        parts.append(f"Still missing after the last round: {missing}")
    return "\n".join(parts)
