"""A local model as a chat model: concurrent conversations give what each gives alone."""

from __future__ import annotations

import json

import pytest

from coinfer.chat import ChatRequest, LocalChat
from coinfer.decoding.sampling import SamplingParams
from coinfer.decoding.speculative import SpecConfig, generate
from coinfer.errors import ConfigError, ContextOverflowError
from tests.conftest import HAS_TORCH

pytestmark = pytest.mark.llama


def _ask(text: str, **kwargs: object) -> ChatRequest:
    return ChatRequest([{"role": "user", "content": text}], **kwargs)  # type: ignore[arg-type]


QUESTIONS = ["What is the capital of France?", "Name three colours.", "Count from one to five.", "Say hi."]


def test_a_concurrent_batch_answers_like_one_at_a_time(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    """Each conversation gets its own answer. Not always byte for byte: llama.cpp rounds a
    batch of sequences differently from one, which can flip a near-tie some tokens in."""
    chat = LocalChat(smollm_llama, max_concurrent=2)  # 4 requests through 2 slots: slots are reused
    alone = [chat.chat(_ask(q, max_tokens=12)) for q in QUESTIONS]
    together = chat.chat_batch([_ask(q, max_tokens=12) for q in QUESTIONS])
    for a, t in zip(alone, together, strict=True):
        assert t.text[:10] == a.text[:10] and t.text  # the start of its own answer, not a neighbour's
    assert len({t.text[:10] for t in together}) == len(QUESTIONS)
    for r, q in zip(together, QUESTIONS, strict=True):
        assert r.usage.prompt_tokens == len(smollm_llama.chat_prompt(_ask(q).messages))
        assert 0 < r.usage.completion_tokens <= 12 and r.usage.calls == 1
        assert r.finish_reasons[0] in ("stop", "length")
    chat.close()
    assert smollm_llama.live_sequences == 0  # every sequence released


def test_greedy_conversations_read_back_choices_and_answer_as_greedy_decoding_does(
    smollm_llama, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    """Greedy conversations get one id per step off the model, not a vocabulary of logits
    (on a GPU, 600 KB a row for a 150k vocabulary), and each answer is the model's own
    greedy text (one at a time here: a batch's rounding may flip a near-tie)."""
    requests = [_ask(q, max_tokens=12) for q in QUESTIONS]
    logits_read: list[int] = []
    monkeypatch.setattr(smollm_llama, "extend_many", _counting(smollm_llama.extend_many, logits_read))
    with LocalChat(smollm_llama, max_concurrent=1) as chat:
        replies = chat.chat_batch(requests)
    with LocalChat(smollm_llama, max_concurrent=4) as chat:
        chat.chat_batch(requests)
    assert logits_read == []
    config = SpecConfig(max_tokens=12)
    for request, reply in zip(requests, replies, strict=True):
        prompt = smollm_llama.chat_prompt(request.messages)
        assert reply.text == generate(smollm_llama, prompt, draft=None, config=config).text


def test_a_seeded_request_samples_the_text_coinfer_generate_samples_from_that_seed(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    """One seed, one text: a served request samples each position with the uniform made
    from its seed and the position, as ``coinfer generate --seed`` and every engine do."""
    for seed, question in enumerate(QUESTIONS):
        # closed before generate runs: a kept cache in the unified cache moves llama.cpp's
        # rounding (the known gap), and a 135M model's samples at temperature 1 follow it
        with LocalChat(smollm_llama, max_concurrent=1) as chat:
            reply = chat.chat(_ask(question, max_tokens=12, temperature=1.0, seed=seed))
        config = SpecConfig(max_tokens=12, sampling=SamplingParams(temperature=1.0, seed=seed))
        prompt = smollm_llama.chat_prompt(_ask(question).messages)
        assert reply.text == generate(smollm_llama, prompt, draft=None, config=config).text


def test_a_mixed_batch_reads_logits_only_for_the_conversations_that_sample(smollm_llama, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A greedy conversation batched with a sampled one still gets only its choice back;
    the sampled one gets its logits, and a seed repeats its answer."""
    greedy = _ask(QUESTIONS[0], max_tokens=12)
    sampled = _ask(QUESTIONS[1], max_tokens=12, temperature=1.0, seed=3)
    with LocalChat(smollm_llama, max_concurrent=1) as chat:
        alone = chat.chat(greedy)
    asked: list[list[bool]] = []
    read = smollm_llama.extend_many_next

    def recording(items, logits_for):  # type: ignore[no-untyped-def]
        choices, rows = read(items, logits_for)
        assert [r is not None for r in rows] == list(logits_for)
        asked.append(list(logits_for))
        return choices, rows

    monkeypatch.setattr(smollm_llama, "extend_many_next", recording)
    with LocalChat(smollm_llama, max_concurrent=2) as chat:
        first = chat.chat_batch([greedy, sampled])
    with LocalChat(smollm_llama, max_concurrent=2) as chat:  # no kept cache: the same batch shapes
        again = chat.chat_batch([greedy, sampled])
    both = [sorted(w) for w in asked if len(w) == 2]  # rows in stream order: the shorter prompt's first
    assert both and all(w == [False, True] for w in both)
    assert first[0].text[:10] == alone.text[:10] and first[1].text
    assert [r.text for r in again] == [r.text for r in first]


def test_samples_are_independent_and_a_seed_repeats_them(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    request = _ask("Write a word.", n=3, temperature=1.0, seed=7, max_tokens=8)
    with LocalChat(smollm_llama, keep=0) as chat:
        first, again = chat.chat(request), chat.chat(request)
    assert first.texts == again.texts and len(first.texts) == 3 and all(first.texts)
    assert len(set(first.texts)) > 1  # three samples, not one answer three times
    assert first.usage.prompt_tokens == 3 * len(smollm_llama.chat_prompt(request.messages))


def test_a_conversation_longer_than_the_window_is_refused(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ContextOverflowError, match="context window"), LocalChat(smollm_llama) as chat:
        chat.chat(_ask("word " * 2000))


def test_the_shared_cache_is_never_overfilled(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    """Conversations whose budgets cannot all fit in the 1024 cells wait for a slot."""
    with LocalChat(smollm_llama, max_concurrent=8) as chat:
        results = chat.chat_batch([_ask(q, max_tokens=400) for q in QUESTIONS])
    assert len(results) == 4 and all(r.texts[0] for r in results)


def test_a_growing_conversation_reads_its_shared_prefix_once(smollm_llama, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Minion's local side: turn after turn over the same long document."""
    fed: list[int] = []
    for name in ("extend_many", "extend_many_greedy"):  # logits, or greedy choices only
        monkeypatch.setattr(smollm_llama, name, _counting(getattr(smollm_llama, name), fed))
    document = "The manual. " + " ".join(f"Setting {i} is {i * 7}." for i in range(60))
    first = [{"role": "system", "content": document}, {"role": "user", "content": "What is setting 3?"}]
    chat = LocalChat(smollm_llama)  # closed below: kept caches hold cells of the shared model
    reply = chat.chat(ChatRequest(first, max_tokens=8)).text
    second = [*first, {"role": "assistant", "content": reply}, {"role": "user", "content": "And setting 4?"}]
    fed.clear()
    reused = chat.chat(ChatRequest(second, max_tokens=8))
    prompt = len(smollm_llama.chat_prompt(second))
    assert fed[0] < prompt - 300  # the document was not read again
    assert reused.usage.prompt_tokens == prompt  # usage still counts the whole prompt
    chat.close()
    fresh = LocalChat(smollm_llama, keep=0).chat(ChatRequest(second, max_tokens=8))
    assert reused.texts[0][:10] == fresh.texts[0][:10]  # the same answer (up to batch rounding)


def _counting(extend, fed: list[int]):  # type: ignore[no-untyped-def]
    def counting(items, **kwargs):  # type: ignore[no-untyped-def]
        fed.append(sum(len(ids) for _, ids in items))
        return extend(items, **kwargs)

    return counting


PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}


def test_a_json_schema_is_enforced_greedy_and_sampled(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    """Where the model would wrap its JSON in a code fence or wander off, the grammar keeps
    every reply to one object of the schema's shape."""
    prompt = "Describe Alice, who is 30, as JSON in a ```json code block, then explain it."
    with LocalChat(smollm_llama, keep=0) as chat:
        free = chat.chat(_ask(prompt, max_tokens=48))
        greedy = chat.chat(_ask(prompt, max_tokens=48, json_schema=PERSON))
        sampled = chat.chat(_ask(prompt, n=3, temperature=1.0, seed=1, max_tokens=48, json_schema=PERSON))
    with pytest.raises(json.JSONDecodeError):
        json.loads(free.text)  # unconstrained, this prompt is not answered with bare JSON
    replies = [(greedy.text, greedy.finish_reasons[0])]
    replies += zip(sampled.texts, sampled.finish_reasons, strict=True)
    for text, finish in replies:
        assert finish == "stop", text  # the object closed, then the grammar let only end-of-text through
        reply = json.loads(text)
        assert set(reply) == {"name", "age"}
        assert isinstance(reply["name"], str) and isinstance(reply["age"], int)
    assert smollm_llama.live_sequences == 0


def test_a_grammar_refuses_a_forbidden_token_instead_of_aborting(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    constraint = smollm_llama.json_constraint(PERSON)
    brace, fence = smollm_llama.tokenize("{")[0], smollm_llama.tokenize("```")[0]
    assert constraint.allows(brace) and not constraint.allows(fence)
    with pytest.raises(ConfigError, match="not allowed"):
        constraint.accept(fence)  # llama.cpp itself would abort the process here
    constraint.accept(brace)
    constraint.close()


@pytest.mark.parametrize("chunk", [1000, 64])
def test_a_long_prompt_is_read_in_chunks_while_the_running_conversation_decodes(chunk: int) -> None:
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=1024)
    chat = LocalChat(model, max_concurrent=2, keep=0, prefill_chunk=chunk)
    greedy = SamplingParams()
    short = chat.new_jobs(0, [1, 2, 3], n=1, max_tokens=30, params=greedy)[0]
    long = chat.new_jobs(1, [5 + i % 200 for i in range(300)], n=1, max_tokens=5, params=greedy)[0]
    waiting, running = deque([short]), []
    running = chat.step(waiting, running)  # the short prompt is read
    waiting.append(long)
    gained = []  # the short one's tokens at each step while the long prompt is read
    while long.reading or not long.tokens:
        before = len(short.tokens)
        running = chat.step(waiting, running)
        gained.append(len(short.tokens) - before)
    while waiting or running:
        running = chat.step(waiting, running)
    assert short.tokens == [40 + (3 + i) % 7 for i in range(30)]  # each its own greedy text
    assert long.tokens == [40 + (300 + i) % 7 for i in range(5)]
    assert max(model.forwards) <= max(chunk, 30)  # no forward read more than a chunk of prompt
    assert all(g == 1 for g in gained)  # the running conversation never waited a step
    # the prompt (in chunks of 64: five), its first token out with the forward over the last chunk
    assert len(gained) == (1 if chunk >= 300 else 5)


def test_a_short_prompt_behind_a_long_one_starts_within_a_step_and_the_long_one_still_advances() -> None:
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=4096)
    chat = LocalChat(model, max_concurrent=3, keep=0, prefill_chunk=256)
    greedy = SamplingParams()
    long = chat.new_jobs(0, [100 + i % 50 for i in range(2000)], n=1, max_tokens=4, params=greedy)[0]
    waiting, running = deque([long]), []
    running = chat.step(waiting, running)  # the long prompt's first chunk
    assert long.read == 256
    short = chat.new_jobs(1, [200 + i for i in range(40)], n=1, max_tokens=4, params=greedy)[0]
    waiting.append(short)
    running = chat.step(waiting, running)
    assert short.tokens == [40 + 40 % 7]  # read whole in the step it joined: its first token out
    assert long.read == 256 + 216  # the rest of the step's budget went on with the long prompt
    while waiting or running:
        running = chat.step(waiting, running)
    assert short.tokens == [40 + (40 + i) % 7 for i in range(4)]
    assert long.tokens == [40 + (2000 + i) % 7 for i in range(4)]
    # two prompts of one length that arrive together: the older is read whole, not both half
    first, second = (
        chat.new_jobs(k, [50 * k + i % 50 for i in range(150)], n=1, max_tokens=2, params=greedy)[0]
        for k in (2, 3)
    )
    running = chat.step(deque([first, second]), [])
    assert first.tokens == [40 + 150 % 7] and not second.tokens and second.read == 256 - 150


def test_prompts_read_in_one_step_are_cut_where_a_whole_read_cuts_its_rows(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Three prompts share a step's 50 tokens of prompt: each chunk starts at a multiple
    of the model's ``prefix_block`` and neither it nor what it leaves is shorter than
    ``min_tail`` (llama.cpp's kernels otherwise round a row otherwise than a whole read,
    and a greedy answer could take the other of two near-tied tokens: once in the load
    test's 43 streams)."""
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=1024)
    model.prefix_block, model.min_tail = 4, 8
    chunks: dict[int, list[tuple[int, int]]] = {}  # each prompt's reads: where and how long
    extend = model._extend

    def recording(seq, ids, tree, last_only):  # type: ignore[no-untyped-def]
        if ids[0] >= 100:  # a prompt's tokens (100 and up), not a decoded one (40-46)
            chunks.setdefault(ids[0] // 50, []).append((len(seq.tokens), len(ids)))
        return extend(seq, ids, tree, last_only)

    monkeypatch.setattr(model, "_extend", recording)
    chat = LocalChat(model, max_concurrent=3, keep=0, prefill_chunk=50)
    lengths = {2: 30, 3: 27, 4: 41}
    jobs = [
        chat.new_jobs(k, list(range(50 * k, 50 * k + n)), n=1, max_tokens=6, params=SamplingParams())[0]
        for k, n in lengths.items()
    ]
    waiting, running = deque(jobs), []
    while waiting or running:
        running = chat.step(waiting, running)
    for job, (k, n) in zip(jobs, lengths.items(), strict=True):
        assert job.tokens == [40 + (n + i) % 7 for i in range(6)]
        starts = [start for start, _ in chunks[k]]
        assert starts == [sum(m for _, m in chunks[k][:i]) for i in range(len(starts))]
        assert sum(m for _, m in chunks[k]) == n  # read once, in order
        for start, m in chunks[k]:
            assert start % 4 == 0 and m >= 8 and (start + m == n or n - start - m >= 8)
    assert max(len(c) for c in chunks.values()) > 1  # the budget did cut prompts


def test_requests_that_share_a_prefix_copy_one_kept_cache_and_count_the_hit() -> None:
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=1024)
    model.max_sequences = 4  # two running, the kept one, and room for a copy
    chat = LocalChat(model, max_concurrent=2, keep=1, min_reuse=64, prefill_chunk=1000)
    document = [5 + i % 200 for i in range(200)]  # a system prompt or a document both send

    def serve(prompts: list[list[int]]) -> list:  # type: ignore[type-arg]
        jobs = [
            chat.new_jobs(i, p, n=1, max_tokens=4, params=SamplingParams())[0] for i, p in enumerate(prompts)
        ]
        waiting, running = deque(jobs), []
        while waiting or running:
            running = chat.step(waiting, running)
        return jobs

    first = serve([[*document, 1, 2]])
    read_before = sum(model.forwards)
    both = serve([[*document, 3], [*document, 4, 4]])  # together: each copies the kept cache
    assert [j.cached for j in first] == [0] and [j.cached for j in both] == [200, 200]
    assert sum(model.forwards) - read_before == 1 + 2 + 2 * 3  # their own tails and tokens, no document
    assert [j.tokens for j in both] == [
        [40 + (201 + i) % 7 for i in range(4)],
        [40 + (202 + i) % 7 for i in range(4)],
    ]
    chat.close()
    assert model.live_sequences == 0


def test_requests_that_arrive_together_with_one_document_read_it_once() -> None:
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=1024)
    chat = LocalChat(model, max_concurrent=3, keep=0, min_reuse=64, prefill_chunk=64)
    document = [5 + i % 200 for i in range(200)]  # a system prompt all three open with
    prompts = [[*document, 1], [*document, 2, 2], [*document, 3, 3, 3]]
    jobs = [chat.new_jobs(i, p, n=1, max_tokens=4, params=SamplingParams())[0] for i, p in enumerate(prompts)]
    waiting, running = deque(jobs), []
    while waiting or running:
        running = chat.step(waiting, running)
    assert [j.cached for j in jobs] == [0, 200, 200]  # the first read it; the others copied it
    assert sum(model.forwards) == 201 + 2 + 3 + 3 * 3  # the document once, each tail, each token
    assert [j.tokens for j in jobs] == [[40 + (len(p) + i) % 7 for i in range(4)] for p in prompts]
    chat.close()
    assert model.live_sequences == 0


def test_a_chat_templates_opening_is_read_once_but_never_waited_for() -> None:
    """Requests that share only a short opening (a chat template's system turn, 24-33
    tokens on Qwen2.5) continue from a kept cache holding it, as llama-server's per-slot
    cache_prompt does; one that arrives while a running request is still reading it reads
    it itself, in the same forward, rather than holding the queue."""
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=1024)
    chat = LocalChat(model, max_concurrent=2, keep=1, prefill_chunk=1000)
    opening = [7 + i for i in range(24)]

    def serve(prompts: list[list[int]]) -> list:  # type: ignore[type-arg]
        jobs = [
            chat.new_jobs(i, p, n=1, max_tokens=3, params=SamplingParams())[0] for i, p in enumerate(prompts)
        ]
        waiting, running, steps = deque(jobs), [], 0
        while waiting or running:
            running, steps = chat.step(waiting, running), steps + 1
        return [*jobs, steps]

    *together, steps = serve([[*opening, 1, 1], [*opening, 2]])
    assert [j.cached for j in together] == [0, 0] and steps == 3  # both read in the first forward
    *alone, _ = serve([[*opening, 3, 3, 3]])
    assert [j.cached for j in alone] == [24]  # the opening from a kept cache
    assert [j.tokens for j in alone] == [[40 + (27 + i) % 7 for i in range(3)]]
    chat.close()
    assert model.live_sequences == 0


def _timed_chat(cost, monkeypatch):  # type: ignore[no-untyped-def]
    """A chat over a scripted model whose forwards take ``cost(rows)`` seconds on a clock
    of the test's own (no wall-clock in the assertions); the rows of every forward."""
    from types import SimpleNamespace

    import coinfer.chat.local as local
    from coinfer.testing import ScriptedModel

    clock = [0.0]
    monkeypatch.setattr(local, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    rows: list[int] = []

    class Timed(ScriptedModel):
        def extend_many_greedy(self, items):  # type: ignore[no-untyped-def]
            rows.append(len(items))
            clock[0] += cost(len(items))
            return super().extend_many_greedy(items)

    model = Timed(lambda prefix: 40 + len(prefix) % 7, n_ctx=1024)
    return LocalChat(model, max_concurrent=8, keep=0), rows


def _decode_eight(chat: LocalChat) -> list[list[int]]:
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams

    prompts = [[1 + i, 2, 3 + i] for i in range(8)]
    greedy = SamplingParams()
    jobs = [chat.new_jobs(i, p, n=1, max_tokens=80, params=greedy)[0] for i, p in enumerate(prompts)]
    waiting, running = deque(jobs), []
    while waiting or running:
        running = chat.step(waiting, running)
    return [j.tokens for j in jobs]


def test_a_decoding_step_runs_as_two_forwards_where_paired_measurements_say_two_cost_less(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """As llama.cpp's CPU kernels can make 8 rows dearer than two forwards of 4, the chat
    measures a split against the whole, pair by pair, and splits once the pairs say it
    pays; every conversation still gets its own greedy text."""
    chat, rows = _timed_chat(lambda n: 1.0 if n >= 8 else 0.1 * n, monkeypatch)
    texts = _decode_eight(chat)
    assert texts == [[40 + (3 + t) % 7 for t in range(80)]] * 8
    later = rows[len(rows) // 2 :]  # once the pairs are in
    assert later.count(4) > 4 * later.count(8)  # mostly two forwards of 4
    assert chat.split_judge.pays(8)


def test_a_decoding_step_stays_one_forward_where_a_split_saves_nothing(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    chat, rows = _timed_chat(lambda n: 0.05 + 0.1 * n, monkeypatch)
    texts = _decode_eight(chat)
    assert texts == [[40 + (3 + t) % 7 for t in range(80)]] * 8
    assert not chat.split_judge.pays(8)
    assert rows.count(4) < rows.count(8) // 3  # a probe now and then, paired with a whole


def test_a_token_is_output_with_the_forward_that_made_it() -> None:
    """A client sees its first token when the prompt's read ends, and its answer's end
    with the forward that chose the last token: a client that waits for one answer
    before it asks again would otherwise lose a step (another prompt's read) per request."""
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=1024)
    chat = LocalChat(model, max_concurrent=2, keep=0)
    job = chat.new_jobs(0, [1, 2, 3], n=1, max_tokens=3, params=SamplingParams())[0]
    waiting, running = deque([job]), []
    running = chat.step(waiting, running)  # reads the prompt
    assert job.tokens == [43] and job.finish is None and running == [job]
    running = chat.step(waiting, running)
    assert job.tokens == [43, 44]
    running = chat.step(waiting, running)  # the third token ends it: retired with this step
    assert job.tokens == [43, 44, 45] and job.finish == "length" and running == []
    assert len(model.forwards) == 3 and model.live_sequences == 0


def _serve_all(chat: LocalChat, prompts: list[list[int]], max_tokens: int = 4) -> list:  # type: ignore[type-arg]
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams

    jobs = [
        chat.new_jobs(i, p, n=1, max_tokens=max_tokens, params=SamplingParams())[0]
        for i, p in enumerate(prompts)
    ]
    waiting, running = deque(jobs), []
    while waiting or running:
        running = chat.step(waiting, running)
    return jobs


def test_a_chat_whose_cache_gave_way_comes_back_from_host_memory() -> None:
    """A chat's next turn after two other conversations took its kept slot: with a store,
    its cache comes back from host memory and only the new turn is read; without, it is
    read from its start. The tokens are the same either way."""
    from coinfer.testing import ScriptedModel

    def serve(store_bytes: int) -> tuple[list, list[int], ScriptedModel]:  # type: ignore[type-arg]
        model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=1024)
        chat = LocalChat(
            model, max_concurrent=1, keep=1, min_reuse=16, prefill_chunk=1000, store_bytes=store_bytes
        )
        turn = [5 + i % 200 for i in range(300)]
        (first,) = _serve_all(chat, [turn])
        _serve_all(chat, [[7] * 100], max_tokens=2)  # others take the kept slot, one after another
        _serve_all(chat, [[9] * 120], max_tokens=2)
        read_before = len(model.forwards)
        (second,) = _serve_all(chat, [[*turn, *first.tokens, 11, 12, 13]])
        chat.close()
        assert model.live_sequences == 0 and chat.stored_bytes == 0
        return [first, second], model.forwards[read_before:], model

    (first, stored), fed, model = serve(store_bytes=10_000)
    (_, read), fed_fresh, _ = serve(store_bytes=0)
    assert model.restored  # from host memory
    assert stored.cached == 300 + 3 and fed[0] == 1 + 3  # the reply's last token (never fed) and the new turn
    assert read.cached == 0 and fed_fresh[0] == 300 + 4 + 3  # the whole conversation again
    assert stored.tokens == read.tokens == [40 + (307 + i) % 7 for i in range(4)]


def test_the_store_keeps_to_its_budget_least_recently_used_first_and_a_chats_latest_turn() -> None:
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=2048)  # a stored token: one byte
    chat = LocalChat(model, max_concurrent=1, keep=0, min_reuse=16, prefill_chunk=1000, store_bytes=600)
    a, b, c = ([k] * 200 for k in (1, 2, 3))
    (a_first,) = _serve_all(chat, [a])
    _serve_all(chat, [b])
    assert chat.stored_bytes == 2 * 203  # each prompt and the tokens fed after it (not the last)
    (again,) = _serve_all(chat, [[*a, *a_first.tokens, 9, 9]])  # a's chat goes on, restored
    assert again.cached == 203
    assert chat.stored_bytes == 203 + 209  # b, and a a turn longer: a's first turn was dropped
    _serve_all(chat, [c])  # past the budget: b, the least recently used, goes
    (a_again,) = _serve_all(chat, [[*a, *a_first.tokens, 9, 9, *again.tokens, 8]])
    (b_again,) = _serve_all(chat, [[*b, 9]])
    assert b_again.cached == 0 and a_again.cached == 209 and chat.stored_bytes <= 600
    chat.close()
    assert model.live_sequences == 0


@pytest.mark.skipif(not HAS_TORCH, reason="needs the torch extra")
@pytest.mark.parametrize("kv", ["dynamic", "static"])
def test_a_transformers_chat_whose_cache_gave_way_comes_back_from_host_memory(tiny_dirs, kv: str) -> None:  # type: ignore[no-untyped-def]
    """The store on transformers (its caches' keys and values copied out; the static
    caches are a GPU's): a chat's next turn after another took its slot is restored, not
    read again, and its greedy answer is the one reading it again gives."""
    from coinfer.models import load_model

    model = load_model(str(tiny_dirs["qwen2"]), backend="transformers", kv=kv, n_ctx=512)
    turn = [5 + i % 90 for i in range(60)]

    def serve(store_bytes: int) -> tuple[object, int]:
        chat = LocalChat(
            model, max_concurrent=1, keep=0, min_reuse=16, prefill_chunk=1000, store_bytes=store_bytes
        )
        (first,) = _serve_all(chat, [turn])
        _serve_all(chat, [[9] * 40], max_tokens=2)  # another conversation takes the slot
        (second,) = _serve_all(chat, [[*turn, *first.tokens, 11, 12]], max_tokens=8)
        stored = chat.stored_bytes
        chat.close()
        return second, stored

    (restored, stored), (read, _) = serve(store_bytes=2**24), serve(store_bytes=0)
    assert stored > 0 and restored.cached == len(turn) + 3  # the turn and the reply's tokens fed
    assert read.cached == 0
    assert restored.tokens == read.tokens
    assert model.live_sequences == 0


def test_a_stored_copy_the_model_cannot_take_back_is_dropped_and_the_prompt_read() -> None:
    from coinfer.errors import ModelError
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=1024)
    chat = LocalChat(model, max_concurrent=1, keep=0, min_reuse=16, prefill_chunk=1000, store_bytes=10_000)
    turn = [5 + i % 200 for i in range(100)]
    (first,) = _serve_all(chat, [turn])
    assert chat.stored_bytes == 103

    def full(seq: object, data: bytes) -> None:
        raise ModelError("no cells for it")

    model._restore = full  # type: ignore[method-assign]
    (second,) = _serve_all(chat, [[*turn, *first.tokens, 11]])
    assert second.cached == 0 and second.tokens == [40 + (105 + i) % 7 for i in range(4)]
    assert chat.stored_bytes == 105 + 3  # the copy that failed went; the new turn was stored
    chat.close()
    assert model.live_sequences == 0


@pytest.mark.parametrize("move", [True, False])
def test_running_requests_keep_to_consecutive_streams_so_a_step_is_one_pass(smollm_path, move: bool) -> None:  # type: ignore[no-untyped-def]
    """With a cache per sequence llama.cpp runs a batch in one pass only over consecutive
    streams. A request that finishes between two running ones keeps its cache for reuse;
    kept where it was, the next request took a stream past the others, and once nobody
    waited the last requests kept the gaps the others left: their steps ran as several
    passes. Kept caches move out of the way (``park``) and the last requests into the gaps
    (``packed``), and every decoding step runs as one pass."""
    from coinfer.models import llamacpp

    model = llamacpp.LlamaCppModel(smollm_path, n_ctx=512, n_seq_max=5, kv_unified=False)
    if not move:
        model.park = model.pack = lambda seq: seq  # type: ignore[method-assign]
    chat = LocalChat(model, max_concurrent=3, keep=2, min_reuse=1000)  # no copies: each reads its prompt
    passes: list[list[int]] = []
    greedy = model.extend_many_greedy

    def watched(items):  # type: ignore[no-untyped-def]
        if all(len(ids) == 1 for _, ids in items):
            passes.append(model.pass_rows([(s, 1) for s, _ in items]))
        return greedy(items)

    model.extend_many_greedy = watched  # type: ignore[method-assign]
    try:
        lengths = [16, 2, 16, 16, 16]  # the second ends first, between the first and the third
        asks = [_ask(f"Count from {n} to {n + 30}.", max_tokens=m) for n, m in enumerate(lengths)]
        results = chat.chat_batch(asks)
        assert all(r.text for r in results)
        split = [p for p in passes if len(p) > 1]
        assert (split == []) if move else split  # left where it was, the same requests' steps split
    finally:
        chat.close()
        model.close()


@pytest.mark.parametrize(
    ("admission", "order"),
    [
        ("shortest", [3, 1, 0, 4, 2]),  # 20, 40; then 300, passed over twice; then 100 before 200
        ("arrival", [0, 1, 2, 3, 4]),
    ],
)
def test_a_crowd_is_admitted_fewest_prompt_tokens_first_and_a_long_prompt_is_not_starved(
    admission: str, order: list[int]
) -> None:
    """Five requests wait for two slots: the shortest prompts start first, and a long one
    goes once a batch's worth (two) of later requests went ahead of it; with ``arrival``
    the oldest goes first. The answers are the same either way."""
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=4096)
    chat = LocalChat(model, max_concurrent=2, keep=0, prefill_chunk=512, admission=admission)
    lengths = [300, 40, 200, 20, 100]  # in the order they arrived
    prompts = [[i + 1, *(100 + k % 50 for k in range(n - 1))] for i, n in enumerate(lengths)]
    jobs = [chat.new_jobs(i, p, n=1, max_tokens=3, params=SamplingParams())[0] for i, p in enumerate(prompts)]
    waiting, running, admitted = deque(jobs), [], []  # type: ignore[var-annotated]
    while waiting or running:
        running = chat.step(waiting, running)
        admitted += [j.request for j in running if j.request not in admitted]  # in the order admitted
    assert admitted == order
    assert [j.tokens for j in jobs] == [[40 + (n + i) % 7 for i in range(3)] for n in lengths]
    chat.close()
    assert model.live_sequences == 0


def test_a_burst_first_step_admits_only_what_it_reads_so_later_shorter_arrivals_still_go_first() -> None:
    """Four long prompts reach an idle chat of four slots first, two short ones a moment
    later (a burst reaches a server over some milliseconds). The first step admits only the
    prompts its budget reads, so the short ones, arriving while it runs, start in the next
    step instead of waiting for a long one to finish; the answers are the same."""
    from collections import deque

    from coinfer.decoding.sampling import SamplingParams
    from coinfer.testing import ScriptedModel

    model = ScriptedModel(lambda prefix: 40 + len(prefix) % 7, n_ctx=4096)
    chat = LocalChat(model, max_concurrent=4, keep=0, prefill_chunk=64)
    lengths = [60, 40, 50, 45, 8, 9]  # in the order they arrived; the last two after the first step
    prompts = [[i + 1, *(100 + k % 50 for k in range(n - 1))] for i, n in enumerate(lengths)]
    params = SamplingParams()
    jobs = [chat.new_jobs(i, p, n=1, max_tokens=20, params=params)[0] for i, p in enumerate(prompts)]
    waiting, running, admitted = deque(jobs[:4]), [], []  # type: ignore[var-annotated]
    running = chat.step(waiting, running)
    assert [j.request for j in running] == [1, 3]  # 40, then 45 (the 40 leave it 24): 50 and 60 wait
    waiting.extend(jobs[4:])
    while waiting or running:
        admitted += [j.request for j in running if j.request not in admitted]  # in the order admitted
        running = chat.step(waiting, running)
    assert admitted == [1, 3, 4, 5, 0, 2]  # 60, passed over by a batch's worth (4), before 50
    assert [j.tokens for j in jobs] == [[40 + (n + i) % 7 for i in range(20)] for n in lengths]
    chat.close()
    assert model.live_sequences == 0


def test_an_unknown_admission_policy_is_refused_with_the_choices() -> None:
    from coinfer.testing import ScriptedModel

    with pytest.raises(ConfigError, match="no admission policy 'lifo'") as caught:
        LocalChat(ScriptedModel(lambda prefix: 1), admission="lifo")
    assert "shortest, arrival" in str(caught.value.hint)
