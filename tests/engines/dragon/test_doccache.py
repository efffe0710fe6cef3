"""Documents' KV caches kept across questions: a later answer that reads the same document
reads only its new question, its logits are those of reading everything afresh, and kept
sequences give way to answers."""

from __future__ import annotations

import numpy as np
import pytest

from coinfer.decoding.learned import Learned
from coinfer.engines.dragon.doccache import MIN_SHARED, DocumentCache
from coinfer.testing import ScriptedModel
from tests.conftest import HAS_LLAMA

DOC = list(b"The tram to the old town leaves from stop 4. ")


def _model() -> ScriptedModel:
    return ScriptedModel(lambda prefix: sum(prefix) % 200, n_ctx=512)


def _read(model: ScriptedModel, cache: DocumentCache, prompts: list[list[int]]) -> list[np.ndarray]:
    items = cache.open(prompts)
    rows = model.extend_many(items, last_only=True)
    cache.keep(prompts, [seq for seq, _ in items])
    for seq, _ in items:
        model.release(seq)
    return [r[-1] for r in rows]


def test_a_second_question_on_a_kept_document_reads_only_the_question() -> None:
    model = _model()
    cache = DocumentCache(model)
    first, second = DOC + list(b"When?"), DOC + list(b"How often?")
    _read(model, cache, [first])
    model.forwards.clear()
    rows = _read(model, cache, [second])
    assert model.forwards == [len(second) - len(DOC)]  # the document was not read again
    assert cache.hits == len(DOC)
    fresh = _model()
    seq = fresh.new_sequence()
    assert np.array_equal(rows[0], fresh.extend(seq, second)[-1])  # as if read afresh


def test_the_same_prompt_again_reads_its_last_token_only() -> None:
    model = _model()
    cache = DocumentCache(model)
    prompt = DOC + list(b"When?")
    _read(model, cache, [prompt])
    model.forwards.clear()
    _read(model, cache, [prompt])
    assert model.forwards == [1]  # the next logits need one token read


def test_unrelated_prompts_share_nothing() -> None:
    model = _model()
    cache = DocumentCache(model)
    _read(model, cache, [DOC + list(b"When?")])
    model.forwards.clear()
    other = list(b"A different document entirely. When?")
    _read(model, cache, [other])
    assert model.forwards == [len(other)] and cache.hits == 0
    assert MIN_SHARED > 1


def test_kept_sequences_beyond_capacity_are_released_oldest_first() -> None:
    model = _model()
    cache = DocumentCache(model, capacity=2)
    prompts = [list(f"Document number {i} says something. Q?".encode()) for i in range(3)]
    for p in prompts:
        _read(model, cache, [p])
    assert model.live_sequences == 2 and cache.cells == len(prompts[1]) + len(prompts[2])


def test_kept_sequences_give_their_slots_to_an_answer() -> None:
    model = _model()
    model.max_sequences = 3  # type: ignore[misc]
    cache = DocumentCache(model, capacity=8)
    for i in range(3):
        _read(model, cache, [list(f"Document number {i} says something. Q?".encode())])
    assert model.live_sequences == 3
    items = cache.open([list(b"One more document, two sequences. Q?"), list(b"And another one here. Q?")])
    assert len(items) == 2 and model.live_sequences <= 3


@pytest.mark.skipif(not HAS_LLAMA, reason="needs the llama extra")
def test_llama_cpp_reads_a_kept_document_as_if_afresh(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    """On llama.cpp's shared cells: fork a kept document's sequence, cut it back, read a
    new question; the next token is the one reading everything afresh gives."""
    model = smollm_llama
    live = model.live_sequences
    cache = DocumentCache(model)
    doc = model.tokenize("The tram to the old town leaves from stop 4, every ten minutes. ")
    first, second = doc + model.tokenize("When?"), doc + model.tokenize("Where does it leave from?")
    for prompt in (first, second):
        items = cache.open([prompt])
        kept_row = model.extend_many(items, last_only=True)[0][-1]
        cache.keep([prompt], [items[0][0]])
        model.release(items[0][0])
    assert cache.hits >= len(doc) - 1
    seq = model.new_sequence()
    fresh_row = model.extend(seq, second)[-1]
    model.release(seq)
    assert int(np.argmax(kept_row)) == int(np.argmax(fresh_row))
    assert np.max(np.abs(kept_row - fresh_row)) < 0.5  # batch shape moves logits slightly
    cache.clear()
    assert model.live_sequences == live


def test_a_device_that_opts_in_reads_a_document_once_and_can_let_it_go() -> None:
    from coinfer.engines.dragon import Document, DragonConfig, generate
    from coinfer.testing import EOS

    model = ScriptedModel(lambda prefix: EOS if len(prefix) > 70 else 97, n_ctx=256)
    docs = [Document("d", bytes(DOC).decode(), 0.0)]
    config = DragonConfig(max_tokens=4, keep_documents=True)
    learned = Learned()  # a session's: the kept documents live as long as it does
    generate(model, "When?", documents=docs, config=config, prompt_style="text", learned=learned)
    model.forwards.clear()
    out = generate(model, "How often?", documents=docs, config=config, prompt_style="text", learned=learned)
    assert out.tokens and model.forwards[0] < len(DOC)  # the document was not read again
    assert model.live_sequences > 0
    learned.close()
    assert model.live_sequences == 0
