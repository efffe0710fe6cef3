"""Real models served: SmolLM2 on llama.cpp, continuously batched (``--engine plain``)
and through the speculative, LLMCad and collective engines, with the official client. Greedy answers equal the
model's own alone, streamed or not, batched or not; a client that goes away frees its
slot."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from coinfer.serve import Server
from tests.conftest import needs_llama

openai = pytest.importorskip("openai")
pytestmark = needs_llama

QUESTIONS = ["What is a list in Python?", "Name three colours.", "Say hello to Ada.", "What is 2 + 2?"]


@pytest.fixture(scope="module")
def server(smollm_path: Path) -> Iterator[Server]:
    from coinfer.chat import open_local_chat
    from coinfer.decoding import NgramDrafter, open_drafter
    from coinfer.engines import get
    from coinfer.models import load_model
    from coinfer.serve.engines import served as serve

    def load(spec: str) -> Any:
        return load_model(spec, backend="llama.cpp", n_ctx=2048)

    chat = open_local_chat("smollm2-135m", n_ctx=1024, parallel=4, keep=1)
    spec_chat = open_local_chat("smollm2-135m", n_ctx=1024, parallel=4, keep=1)
    models = [load("smollm2-135m") for _ in range(5)]  # each engine's target (2 speculative), LLMCad's draft
    target, cad_target, cad_draft, voted, fixed = models
    drafter = open_drafter(
        "smollm2-135m", voted, load=load, draft_prompts=lambda m: [], target_prompt_lens=[]
    )
    sessions = {  # every engine through the registry and the one served adapter
        "plain": get("plain").open({"target": chat.model, "chat": chat}),
        "spec": get("speculative").open({"target": target, "draft": NgramDrafter()}),
        # drafts whenever the n-gram matches, whatever this machine's costs make the adaptive policy do
        "spec-fixed": get("speculative").open(
            {"target": fixed, "draft": NgramDrafter()}, get("speculative").config(draft_tokens=8)
        ),
        # the speculative engine batched: its drafts ride in the chat's continuous batch
        "spec-batch": get("speculative").open(
            {"target": spec_chat.model, "chat": spec_chat, "draft": NgramDrafter()},
            get("speculative").config(draft_tokens=8),
        ),
        "llmcad": get("llmcad").open({"target": cad_target, "draft_model": cad_draft}),
        "collective": get("collective").open({"target": voted, "drafts": [NgramDrafter(), drafter]}),
    }
    served = {name: serve(session, name=name) for name, session in sessions.items()}
    with Server(served) as s:
        yield s
    chat.model.close()
    spec_chat.model.close()
    drafter.close()
    for m in models:
        m.close()


def _ask(client: openai.OpenAI, model: str, question: str, **kw: object) -> str:
    kw = {"temperature": 0, "max_tokens": 48, **kw}
    r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}], **kw)
    return str(r.choices[0].message.content)


def _stream(client: openai.OpenAI, model: str, question: str, max_tokens: int = 48) -> tuple[str, str | None]:
    chunks = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=max_tokens,
        stream=True,
    )
    text, finish = "", None
    for c in chunks:
        if c.choices:
            text += c.choices[0].delta.content or ""
            finish = c.choices[0].finish_reason or finish
    return text, finish


def _record(client: openai.OpenAI, model: str, question: str) -> tuple[str, dict[str, Any]]:
    """A streamed answer of 16 tokens and the engine's record on its last chunk."""
    chunks = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": question}],
        temperature=0,
        max_tokens=16,
        stream=True,
    )
    text, record = "", {}
    for c in chunks:
        text += (c.choices[0].delta.content or "") if c.choices else ""
        record = c.model_extra.get("coinfer") or record
    return text, record


def test_greedy_answers_are_the_same_streamed_batched_and_speculative(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="unused")
    alone = [_ask(client, "plain", q) for q in QUESTIONS]
    assert all(alone) and len(set(alone)) == len(alone)
    with ThreadPoolExecutor(len(QUESTIONS)) as pool:  # together: one batch
        together = list(pool.map(lambda q: _stream(client, "plain", q), QUESTIONS))
    assert [t for t, _ in together] == alone and all(f in ("stop", "length") for _, f in together)
    from coinfer.models import load_model

    reference = load_model("smollm2-135m", backend="llama.cpp", n_ctx=2048)
    try:  # verifying several tokens in one forward may flip a near-tie (the README's known gap)
        for engine in ("spec", "llmcad", "collective"):
            answers = zip(QUESTIONS, [_ask(client, engine, q) for q in QUESTIONS], strict=True)
            assert all(_same_up_to_a_near_tie(reference, q, a, 48) for q, a in answers), engine
    finally:
        reference.close()


def _same_up_to_a_near_tie(model: Any, question: str, got: str, n: int = 16) -> bool:
    """``got`` is the target's own greedy ``n`` tokens, or departs from them at a near-tie."""
    from tests.conftest import departs_at_a_near_tie, plain

    prompt = model.chat_prompt([{"role": "user", "content": question}])
    alone = plain(model, prompt, n).tokens
    return model.detokenize(alone) == got or departs_at_a_near_tie(model, prompt, alone, model.tokenize(got))


def test_collective_requests_that_arrive_together_share_its_batch(server: Server) -> None:
    """Greedy answers batched together are the target's own, but where a batch's rounding
    picks the other of two near-tied tokens (a batch prefills and verifies several
    requests' tokens in one forward)."""
    from coinfer.models import load_model

    client = openai.OpenAI(base_url=server.url, api_key="unused")
    alone = [_ask(client, "plain", q, max_tokens=16) for q in QUESTIONS]
    with ThreadPoolExecutor(len(QUESTIONS)) as pool:  # the collective engine's batch
        together = list(pool.map(lambda q: _record(client, "collective", q), QUESTIONS))
    reference = load_model("smollm2-135m", backend="llama.cpp", n_ctx=2048)
    try:
        assert all(
            _same_up_to_a_near_tie(reference, q, t) for q, (t, _) in zip(QUESTIONS, together, strict=True)
        )
    finally:
        reference.close()
    rounds = [r["stats"]["rounds"] for _, r in together]  # each request's verifications
    run = max(r["extras"]["verifications"] for _, r in together)  # the batch's forwards
    assert run < sum(rounds)  # one forward verified several requests
    stop = alone[0].split()[2]  # the third word: before any near-tie a batch might flip
    stopped = _ask(client, "collective", QUESTIONS[0], stop=[stop], max_tokens=16)
    assert stopped and alone[0].startswith(stopped) and stop not in stopped
    sampled = {"temperature": 0.8, "seed": 3, "max_tokens": 16}
    first, again = (_ask(client, "collective", QUESTIONS[1], **sampled) for _ in range(2))
    assert first == again


def test_the_speculative_engines_record_comes_back(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="unused")
    ask = [{"role": "user", "content": "Repeat: a b c d e f a b c d e f"}]
    r = client.chat.completions.create(model="spec", messages=ask, temperature=0, max_tokens=32)
    record = r.model_extra["coinfer"]
    assert record["engine"] == "speculative" and record["extras"]["draft"] == "ngram"
    assert record["stats"]["n_tokens"] == r.usage.completion_tokens and record["stats"]["rounds"] >= 1


def test_the_speculative_engine_drafts_inside_one_batch_of_concurrent_requests(server: Server) -> None:
    from coinfer.models import load_model

    client = openai.OpenAI(base_url=server.url, api_key="unused")
    asks = [*QUESTIONS, "Repeat: a b c d e f a b c d e f"]
    with ThreadPoolExecutor(len(asks)) as pool:
        together = list(pool.map(lambda q: _record(client, "spec-batch", q), asks))
    reference = load_model("smollm2-135m", backend="llama.cpp", n_ctx=2048)
    try:  # the target's greedy text, up to the near-ties a batch's rounding may flip
        assert all(_same_up_to_a_near_tie(reference, q, t) for q, (t, _) in zip(asks, together, strict=True))
    finally:
        reference.close()
    records = [r for _, r in together]
    assert all(r["engine"] == "speculative" for r in records)
    assert sum(r["stats"]["drafted"] for r in records) > 0  # the repeated text was drafted
    assert all(0 <= r["stats"]["accepted"] <= r["stats"]["drafted"] for r in records)
    mixed = [
        ("spec-batch@plain", asks[-1]),
        ("spec-batch@speculative", asks[-1]),
        ("spec-batch@plain", asks[0]),
    ]
    with ThreadPoolExecutor(len(mixed)) as pool:  # one target, one batch, two engines
        chosen = list(pool.map(lambda m: _record(client, *m), mixed))
    assert [r["engine"] for _, r in chosen] == ["plain", "speculative", "plain"]
    assert chosen[0][1]["stats"]["drafted"] == 0 == chosen[2][1]["stats"]["drafted"]
    assert chosen[1][1]["stats"]["drafted"] > 0
    ids = {m.id for m in client.models.list()}
    assert {"spec-batch", "spec-batch@plain", "spec-batch@speculative"} <= ids and "plain@plain" not in ids
    with pytest.raises(openai.NotFoundError):
        _ask(client, "spec-batch@llmcad", asks[0])
    sampled = {"temperature": 0.8, "seed": 3, "max_tokens": 16, "n": 2}  # samples batch alongside
    r = client.chat.completions.create(
        model="spec-batch", messages=[{"role": "user", "content": QUESTIONS[1]}], **sampled
    )
    assert len(r.choices) == 2 and all(c.message.content for c in r.choices)


@pytest.mark.parametrize("model", ["plain", "spec-fixed"])
def test_every_answer_has_a_trace_page_whose_tokens_are_the_answers(server: Server, model: str) -> None:
    import json
    import urllib.error
    import urllib.request

    from coinfer.decoding.trace import origin_counts

    client = openai.OpenAI(base_url=server.url, api_key="unused")
    ask = [{"role": "user", "content": "Repeat: a b c d e f a b c d e f"}]
    r = client.chat.completions.create(model=model, messages=ask, temperature=0, max_tokens=32)
    path = r.model_extra["coinfer"]["trace"]
    assert path == f"/traces/{r.id}"
    root = server.url.removesuffix("/v1")
    with urllib.request.urlopen(root + path + ".json") as answer:
        trace = json.load(answer)
    counts = origin_counts(trace)
    assert sum(counts.values()) == r.usage.completion_tokens
    assert trace["text"].startswith(r.choices[0].message.content)
    if model == "spec-fixed":  # the n-gram's kept drafts (an end-of-turn among them is no token of the text)
        assert 0 < counts["ngram"] <= trace["stats"]["accepted"] and trace["draft"] == "ngram"
    else:
        assert counts["target"] == r.usage.completion_tokens
    with urllib.request.urlopen(root + path) as html:
        assert html.status == 200 and "text/html" in html.headers["content-type"]
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(root + "/traces/chatcmpl-nosuch")
    assert missing.value.code == 404


def test_completions_and_samples(server: Server) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="unused")
    r = client.completions.create(model="plain", prompt="def add(a, b):", max_tokens=12, temperature=0)
    assert r.choices[0].text and r.usage.prompt_tokens > 3
    kw = {"model": "plain", "messages": [{"role": "user", "content": "Tell me a word."}], "max_tokens": 8}
    a = client.chat.completions.create(**kw, n=2, temperature=1.0, seed=5)
    b = client.chat.completions.create(**kw, n=2, temperature=1.0, seed=5)
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert len(a.choices) == 2


@pytest.mark.parametrize("model", ["plain", "spec", "collective"])
def test_a_client_that_goes_away_frees_its_place(server: Server, model: str) -> None:
    client = openai.OpenAI(base_url=server.url, api_key="unused")
    chunks = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Write a long story."}],
        max_tokens=900,
        stream=True,
    )
    for i, _ in enumerate(chunks):
        if i == 3:
            break
    chunks.close()
    deadline = time.monotonic() + 20
    while server.served[model].depth and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.served[model].depth == 0
    assert _ask(client, model, QUESTIONS[0])  # still serving
