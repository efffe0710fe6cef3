"""A side's Decoder: its documents mixed by relevance, rolled back to the accepted text,
and on the real SmolLM2 one document is plain decoding of that document's prompt."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest

from coinfer.decoding import SamplingParams
from coinfer.engines.dragon import Document, DragonConfig, RagSide, generate
from coinfer.errors import ConfigError
from coinfer.testing import EOS, ScriptedModel
from tests.conftest import needs_llama, plain

QUESTION = "?"


def _by_document(prefix: list[int]) -> Mapping[int, float]:
    """After document "A" the model leans to 'a', after "B" firmly to 'b'; it ends after
    three tokens (the prompts are 4: the document, a blank line, the question)."""
    if len(prefix) >= 7:
        return {EOS: 1.0}
    return {ord("a"): 0.7, ord("b"): 0.3} if prefix[0] == ord("A") else {ord("a"): 0.1, ord("b"): 0.9}


def _model() -> ScriptedModel:
    return ScriptedModel(_by_document, n_ctx=64)


def _docs(weight_a: float) -> list[Document]:
    return [Document("A", "A", float(np.log(weight_a))), Document("B", "B", 0.0)]


@pytest.mark.parametrize(("weight_a", "expected"), [(1.0, "bbb"), (4.0, "aaa")])
def test_each_token_is_the_mixtures_most_likely(weight_a: float, expected: str) -> None:
    # equal weights: a 0.4, b 0.6; A four times B: a 0.58, b 0.42
    model = _model()
    out = generate(model, QUESTION, documents=_docs(weight_a), prompt_style="text")
    assert out.text == expected and out.finish_reason == "stop"
    assert set(model.released) and model.live_sequences == 0  # every document's sequence freed


def _side(model: ScriptedModel, sampling: SamplingParams = SamplingParams()) -> RagSide:  # noqa: B008
    return RagSide(
        model,
        _docs(1.0),
        lambda d: model.text_prompt(f"{d.text}\n\n{QUESTION}"),
        sampling=sampling,
        seed=1,
        side=0,
    )


def test_a_rejected_draft_rolls_every_document_back_to_the_accepted_text() -> None:
    model = _model()
    side, fresh = _side(model), _side(model)
    side.start()
    fresh.start()
    for t in b"bbb":
        side.advance(t)
    side.sync(list(b"ab"))
    fresh.sync(list(b"ab"))
    assert side.generated == list(b"ab")
    assert np.array_equal(side.distribution()[0].dense(), fresh.distribution()[0].dense())
    side.sync([])
    assert side.draft().token == ord("b") and side.draft().position == 0


def test_sampled_drafts_follow_the_seed_and_the_position() -> None:
    sampling = SamplingParams(temperature=1.0)
    a, b = _side(_model(), sampling), _side(_model(), sampling)
    a.start()
    b.start()
    assert [a.draft().token for _ in range(3)] == [b.draft().token] * 3


def test_a_side_without_documents_says_what_to_do() -> None:
    with pytest.raises(ConfigError, match="at least one document"):
        RagSide(_model(), [], lambda d: [], sampling=SamplingParams(), seed=0, side=0)


@needs_llama
def test_one_document_on_smollm_is_plain_greedy_decoding(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    doc = Document("notes", "The maintenance window for the Oslo cluster is every Tuesday at 02:00.", 1.0)
    question = "When is the Oslo maintenance window?"
    out = generate(smollm_llama, question, documents=[doc], config=DragonConfig(max_tokens=12))
    prompt = smollm_llama.user_prompt(
        question, system=f"Use this document where it helps to answer.\n\n{doc.text}"
    )
    assert out.tokens == plain(smollm_llama, prompt, 12).tokens
    assert smollm_llama.live_sequences == 0


def test_dynamic_weights_follow_the_text_at_each_rescoring_point() -> None:
    """Re-scored every 2 tokens against the text so far: the weights after "b?" lean to A
    (the re-scorer prefers A once the text holds a "b"), and they are a function of the
    agreed text alone, so a rollback recomputes them rather than keep stale ones."""
    calls: list[str] = []

    def rescore(docs: object, text: str) -> np.ndarray:
        calls.append(text)
        return np.array([np.log(4.0), 0.0]) if "b" in text else np.array([0.0, 0.0])

    model = _model()
    side = RagSide(
        model,
        _docs(1.0),
        lambda d: model.text_prompt(f"{d.text}\n\n{QUESTION}"),
        sampling=SamplingParams(),
        seed=1,
        side=0,
        rescore=rescore,
        rescore_every=2,
    )
    side.start()
    assert side.draft().token == ord("b") and calls == []  # the retrieval weights until token 2
    side.advance(ord("b"))
    assert side.draft().token == ord("b") and calls == []  # 1 token: still not a rescoring point
    side.advance(ord("b"))
    assert side.draft().token == ord("a") and calls == ["bb"]  # A weighs 4x now: a 0.58
    side.draft()
    assert calls == ["bb"]  # kept while the text up to the point is unchanged
    side.sync(list(b"aa"))
    assert side.draft().token == ord("b") and calls == ["bb", "aa"]  # back to equal weights
    side.close()
