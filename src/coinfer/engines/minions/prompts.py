"""The prompts of the local–remote protocols, kept short: every remote token is paid for.

The paper's appendix F names its prompts without printing them; these follow its
descriptions (§4, §5.1): the remote supervises without the documents, the local model
does one simple task on one excerpt at a time and abstains where the excerpt is silent.
"""

from __future__ import annotations

from collections.abc import Sequence

from coinfer.chat.base import ChatRequest

# ---- JSON shapes (passed as json_schema where the server can enforce them) -------------


def _object(**properties: dict[str, object]) -> dict[str, object]:
    """A JSON object schema whose properties are all required, in this order."""
    return {"type": "object", "properties": properties, "required": list(properties)}


_TEXT: dict[str, object] = {"type": "string"}
_TEXT_OR_NULL: dict[str, object] = {"type": ["string", "null"]}
JOB_SCHEMA = _object(explanation=_TEXT, citation=_TEXT_OR_NULL, answer=_TEXT_OR_NULL)
FINAL_SCHEMA = _object(decision={"const": "final"}, answer=_TEXT)
MORE_SCHEMA = _object(decision={"const": "more"}, missing=_TEXT, notes=_TEXT)
ASK_SCHEMA = _object(decision={"const": "ask"}, message=_TEXT)
DECISION_SCHEMA = {"anyOf": [FINAL_SCHEMA, MORE_SCHEMA]}  # a MinionS round's end
CHAT_SCHEMA = {"anyOf": [FINAL_SCHEMA, ASK_SCHEMA]}  # a Minion turn

ANSWER_STYLE = "Give the answer itself, as short as it can be (a name, a number, a phrase)."


def documents_block(documents: Sequence[tuple[str, str]]) -> str:
    """The documents, each fenced under its name (for whichever side reads them in full)."""
    return "\n\n".join(f'Document "{name}":\n"""\n{text}\n"""' for name, text in documents)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def system(text: str) -> dict[str, str]:
    return {"role": "system", "content": text}


def assistant(text: str) -> dict[str, str]:
    return {"role": "assistant", "content": text}


# ---- baselines -------------------------------------------------------------------------


def direct_request(question: str, documents: Sequence[tuple[str, str]], max_tokens: int) -> ChatRequest:
    """Remote-only and local-only: the whole documents and the question in one prompt."""
    prompt = f"{documents_block(documents)}\n\nQuestion: {question}\n{ANSWER_STYLE}"
    return ChatRequest([user(prompt)], max_tokens=max_tokens)


def rag_request(question: str, chunks: Sequence[tuple[str, str]], max_tokens: int) -> ChatRequest:
    """RAG: the retrieved excerpts (document name, text) and the question."""
    excerpts = "\n\n".join(f'Excerpt from "{name}":\n"""\n{text}\n"""' for name, text in chunks)
    prompt = f"{excerpts}\n\nQuestion: {question}\nAnswer from the excerpts. {ANSWER_STYLE}"
    return ChatRequest([user(prompt)], max_tokens=max_tokens)


# ---- Minion: free chat -----------------------------------------------------------------

MINION_REMOTE = (
    "You answer a question about documents you cannot see, helped by a small model that has read them."
)
MINION_FIRST = "Ask the small model one simple question that helps. Reply with the question only."
MINION_TURN = (
    'JSON only: {"decision": "final", "answer": "<the shortest answer to the question>"} '
    'or {"decision": "ask", "message": "<next simple question>"}'
)
MINION_LOCAL = (
    "You have the documents below. Another model, working on a question about them, will ask you "
    "about them: answer from the documents only, briefly, quoting the words that support your answer.\n\n"
)
MINION_LOCAL_FIRST = "The question being worked on: {question}\n\n{message}"
MINION_LAST = 'JSON only: {"decision": "final", "answer": "<the shortest best answer to the question>"}'


# ---- MinionS: decompose, execute, aggregate ---------------------------------------------

JOB_API_SUMMARY = """\
Write Python: a function prepare_jobs(documents, last_jobs, last_outputs) returning a list of JobManifest.
- documents: Document(name, text) each. last_jobs, last_outputs: the previous round's jobs and, index \
for index, the local answers JobOutput(explanation, citation, answer) (answer None: abstained); empty in \
round 1.
- Defined already, do not import or redefine: JobManifest(chunk, task, advice="", doc=""), \
chunk_by_chars(text, size, overlap=0), chunk_by_paragraphs(text, max_chars), chunk_by_pages(text, \
pages_per_chunk=1, page_chars=3000), chunk_by_code_blocks(text, max_chars), chunk_by_sections(text, \
max_chars). Import nothing but re, json, math, collections, itertools, functools.
- A job is one chunk and one task: a precise question about one fact the answer needs. The local model \
sees only its chunk and task, never the user's question, and abstains where the chunk is silent. Use \
chunks of about {chunk_chars} characters and at most {tasks} tasks. The simplest plan, to improve on:
def prepare_jobs(documents, last_jobs, last_outputs):
    tasks = [{question!r}]
    return [JobManifest(chunk=c, task=t, doc=d.name) for d in documents
            for c in chunk_by_paragraphs(d.text, {chunk_chars}) for t in tasks]
Reply with one ```python block only."""

JOB_SYSTEM = (
    "You read one excerpt of a document and do one task. Reply with one JSON object only: "
    '{"explanation": "<how the excerpt answers the task>", "citation": "<the exact words from the excerpt>", '
    '"answer": "<the answer>"}. If the excerpt does not contain what the task asks for, abstain: '
    '{"explanation": "<why not>", "citation": null, "answer": null}.'
)

TRUST = (
    "Answer from the local model's answers above, not from memory: the documents may differ from "
    "what you know. The local model is small and often invents: trust an answer backed by a quote, "
    "then one found in the text of its excerpts. "
)
AGGREGATE_TAIL = (
    TRUST + "If you can answer the question now, reply with JSON only: "
    '{"decision": "final", "answer": "<the answer>"}. '
    'Otherwise: {"decision": "more", "missing": "<what is still needed and where to look>", '
    '"notes": "<what you have learned so far>"}. ' + ANSWER_STYLE
)
AGGREGATE_LAST = (
    TRUST
    + 'This is the last round. Reply with JSON only: {"decision": "final", "answer": "<your best answer from '
    'what you have>"}. ' + ANSWER_STYLE
)


def decompose_request(
    question: str,
    documents: Sequence[tuple[str, str]],
    context: str,
    *,
    chunk_chars: int,
    tasks: int,
) -> ChatRequest:
    listing = ", ".join(f'"{name}" ({len(text)} characters)' for name, text in documents)
    parts = [
        "You supervise a small local model that holds documents you cannot see.",
        f"Question: {question}",
        f"Documents: {listing}",
        context,
        JOB_API_SUMMARY.format(chunk_chars=chunk_chars, tasks=tasks, question=question),
    ]
    return ChatRequest([user("\n".join(p for p in parts if p))], max_tokens=768)


def code_fix_request(previous: ChatRequest, reply: str, error: str) -> ChatRequest:
    """The conversation so far plus the sandbox's error, asking for corrected code."""
    fix = f"Running your code failed: {error}\nReply with the corrected ```python block only."
    return ChatRequest([*previous.messages, assistant(reply), user(fix)], max_tokens=previous.max_tokens)


def job_request(chunk: str, task: str, advice: str, *, samples: int, max_tokens: int) -> ChatRequest:
    """One job for the local model. The excerpt goes without its document's name: small
    models cite the name instead of the excerpt's words."""
    hint = f"\nAdvice: {advice}" if advice else ""
    prompt = f'Excerpt:\n"""\n{chunk}\n"""\n\nTask: {task}{hint}'
    temperature = 0.0 if samples == 1 else 0.7
    return ChatRequest(
        [system(JOB_SYSTEM), user(prompt)],
        n=samples,
        max_tokens=max_tokens,
        temperature=temperature,
        json_schema=JOB_SCHEMA,
    )


def json_retry_request(previous: ChatRequest, reply: str) -> ChatRequest:
    """Ask once more for the JSON object the first reply did not contain."""
    again = "That was not one valid JSON object. Reply with the JSON object only."
    return ChatRequest(
        [*previous.messages, assistant(reply[:2000]), user(again)],
        n=1,
        max_tokens=previous.max_tokens,
        temperature=0.0,
        json_schema=previous.json_schema,
    )


def aggregate_request(question: str, context: str, findings: str, *, last: bool) -> ChatRequest:
    parts = [
        f"Question: {question}",
        context,
        "The local model's answers on excerpts of the documents (abstentions left out):",
        findings or "(none: every excerpt abstained)",
        AGGREGATE_LAST if last else AGGREGATE_TAIL,
    ]
    schema = FINAL_SCHEMA if last else DECISION_SCHEMA
    return ChatRequest([user("\n".join(p for p in parts if p))], max_tokens=384, json_schema=schema)
