"""The API that the remote model's job-preparation code is written against.

MinionS (paper 000, §5.1, step 1) has the remote model write a Python function that turns
the documents it never sees into jobs for the local model::

    def prepare_jobs(documents, last_jobs, last_outputs):
        jobs = []
        for doc in documents:
            for i, chunk in enumerate(chunk_by_paragraphs(doc.text, max_chars=3000)):
                jobs.append(JobManifest(chunk=chunk, task="Find the default port.", doc=doc.name))
        return jobs

* ``documents``: ``Document(name, text)`` for every document;
* ``last_jobs`` / ``last_outputs``: the previous round's jobs and, index for index, what
  the local model answered (``JobOutput(explanation, citation, answer)``; ``answer`` None
  when it abstained), so a later round can zoom in on what an earlier one found;
* chunking helpers: ``chunk_by_chars``, ``chunk_by_paragraphs``, ``chunk_by_pages``,
  ``chunk_by_code_blocks``, ``chunk_by_sections``;
* returns a list of ``JobManifest(chunk, task, advice="", doc="")``.

This module runs inside the sandbox (``coinfer.sandbox``) as the trusted module
``minions``: standard library only, and it never touches files. ``collect_jobs`` is what
the sandbox calls: it converts the inputs, runs ``prepare_jobs`` and checks and numbers
what it returns, with messages the remote model can act on.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

MAX_JOBS = 256
MAX_CHUNK_CHARS = 24_000


@dataclass
class Document:
    """One document the local side holds."""

    name: str
    text: str


@dataclass
class JobManifest:
    """One job for the local model: one simple ``task`` on one ``chunk`` of a document."""

    chunk: str
    task: str
    advice: str = ""
    doc: str = ""
    task_id: int = -1  # numbered by collect_jobs: jobs with the same task share it
    chunk_id: int = -1  # numbered by collect_jobs: jobs with the same chunk share it


@dataclass
class JobOutput:
    """The local model's answer to a job; ``answer`` None means it abstained."""

    explanation: str
    citation: str | None
    answer: str | None


def chunk_by_chars(text: str, size: int = 3000, overlap: int = 0) -> list[str]:
    """Pieces of ``size`` characters, each starting ``size - overlap`` after the last."""
    if size < 1 or not 0 <= overlap < size:
        raise ValueError(f"need size >= 1 and 0 <= overlap < size, got {size}, {overlap}")
    step = size - overlap
    return [text[i : i + size] for i in range(0, max(len(text) - overlap, 1), step) if text[i : i + size]]


def chunk_by_paragraphs(text: str, max_chars: int = 3000) -> list[str]:
    """Consecutive paragraphs (blank-line separated) grouped up to ``max_chars``; a longer
    paragraph is cut by characters."""
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
    return _group(paragraphs, max_chars, "\n\n")


def chunk_by_pages(text: str, pages_per_chunk: int = 1, page_chars: int = 3000) -> list[str]:
    """Pages split at form feeds, or of ``page_chars`` characters where there are none;
    ``pages_per_chunk`` of them per chunk."""
    pages = text.split("\f") if "\f" in text else chunk_by_chars(text, page_chars)
    pages = [p for p in pages if p.strip()]
    return ["\f".join(pages[i : i + pages_per_chunk]) for i in range(0, len(pages), max(1, pages_per_chunk))]


def chunk_by_code_blocks(text: str, max_chars: int = 6000) -> list[str]:
    """Top-level blocks of source code (a ``def``, ``class`` or decorated block with what
    follows it, up to the next), or fenced blocks of a Markdown text; grouped up to
    ``max_chars``."""
    # a fence opens at the start of a line (Markdown's rule): anywhere, a run of backticks
    # made the search quadratic (20,000 backticks took 0.5 s, 200,000 about a minute)
    fenced = re.findall(r"^[ \t]*```[^\n]*\n(.*?)```", text, flags=re.S | re.M)
    if fenced:
        return _group([b for b in fenced if b.strip()], max_chars, "\n")
    starts, pos, after_decorator = [], 0, False
    for line in text.splitlines(keepends=True):
        if re.match(r"(?:@|def\b|async\s+def\b|class\b)", line) and not after_decorator:
            starts.append(pos)
        after_decorator = line.startswith("@")
        pos += len(line)
    return _group(_split_at(text, starts), max_chars, "")


def chunk_by_sections(text: str, max_chars: int = 6000) -> list[str]:
    """Sections that start at a heading (Markdown ``#``, or a line underlined with
    ``=``, ``-`` or ``~``), grouped up to ``max_chars``."""
    heading = r"^(?:#{1,6} .+|.+\n[=\-~^]{3,})$"
    starts = [m.start() for m in re.finditer(heading, text, flags=re.M)]
    return _group(_split_at(text, starts), max_chars, "")


def _split_at(text: str, starts: list[int]) -> list[str]:
    """The non-blank pieces of ``text`` cut at each offset in ``starts``."""
    bounds = [0, *[s for s in starts if s > 0], len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if text[a:b].strip()]


def _group(pieces: list[str], max_chars: int, sep: str) -> list[str]:
    """Consecutive pieces joined while they fit in ``max_chars``; longer ones cut by characters."""
    if max_chars < 1:
        raise ValueError(f"max_chars must be at least 1, got {max_chars}")
    out: list[str] = []
    current = ""
    for piece in pieces:
        if len(piece) > max_chars:
            if current:
                out.append(current)
                current = ""
            out.extend(c for c in chunk_by_chars(piece, max_chars) if c.strip())  # no blank jobs
        elif current and len(current) + len(sep) + len(piece) > max_chars:
            out.append(current)
            current = piece
        else:
            current = current + sep + piece if current else piece
    if current:
        out.append(current)
    return out


def collect_jobs(prepare_jobs, documents, last_jobs, last_outputs):  # type: ignore[no-untyped-def]
    """Run the remote's ``prepare_jobs`` on JSON inputs; the checked, numbered jobs as JSON."""
    docs = [Document(d["name"], d["text"]) for d in documents]
    jobs = prepare_jobs(docs, [JobManifest(**j) for j in last_jobs], [JobOutput(**o) for o in last_outputs])
    if not isinstance(jobs, list) or not all(isinstance(j, JobManifest) for j in jobs):
        raise TypeError("prepare_jobs must return a list of JobManifest")
    if not jobs:
        raise ValueError("prepare_jobs returned no jobs; return at least one JobManifest")
    if len(jobs) > MAX_JOBS:
        raise ValueError(
            f"prepare_jobs returned {len(jobs)} jobs; at most {MAX_JOBS}: use larger chunks or fewer tasks"
        )
    tasks: dict[str, int] = {}
    chunks: dict[str, int] = {}
    out = []
    for job in jobs:
        if not isinstance(job.chunk, str) or not isinstance(job.task, str) or not job.task.strip():
            raise TypeError("every JobManifest needs a string chunk and a non-empty string task")
        if len(job.chunk) > MAX_CHUNK_CHARS:
            raise ValueError(
                f"a chunk has {len(job.chunk)} characters; at most {MAX_CHUNK_CHARS}: chunk smaller"
            )
        job.task_id = tasks.setdefault(job.task, len(tasks))
        job.chunk_id = chunks.setdefault(job.chunk, len(chunks))
        out.append(asdict(job))
    return out
