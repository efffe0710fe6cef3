"""One model shared by the threads of requests served at once: each thread gets what it
would get alone, forwards asked for while another runs are merged into the next one,
and a merged forward's failure reaches only the request it belongs to."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from coinfer.errors import ContextOverflowError, ModelError
from coinfer.models.shared import SharedModel
from coinfer.testing import ScriptedModel
from tests.conftest import NEAR_TIE, needs_llama


def _model() -> ScriptedModel:
    return ScriptedModel(lambda prefix: 97 + (len(prefix) * 7 + sum(prefix[-3:])) % 26, n_ctx=64)


def _decode(model: Any, prompt: list[int], n: int) -> list[int]:
    seq = model.new_sequence()
    out = [int(model.extend_greedy(seq, prompt)[-1])]
    for _ in range(n - 1):
        out.append(int(model.extend_greedy(seq, [out[-1]])[-1]))
    model.release(seq)
    return out


def _on_threads(work: list[Any]) -> list[Any]:
    results: list[Any] = [None] * len(work)

    def run(i: int) -> None:
        results[i] = work[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


PROMPTS = [[104, 105], [120, 121, 122], [65], [66, 67, 68, 69]]


def test_threads_decoding_at_once_share_forwards_and_get_what_they_get_alone() -> None:
    alone = [_decode(_model(), p, 8) for p in PROMPTS]
    inner = _model()
    shared = SharedModel(inner)
    inner.go.clear()
    threading.Timer(0.3, inner.go.set).start()  # every thread queues behind the first forward
    together = _on_threads([lambda p=p: _decode(shared, p, 8) for p in PROMPTS])
    assert together == alone
    assert max(inner.batch_sizes) > 1 and shared.merged > 1  # some forwards ran together
    assert sum(inner.batch_sizes) == 8 * len(PROMPTS)  # every forward once: nothing run twice
    assert inner.live_sequences == 0


def test_a_merged_forward_that_fails_fails_only_its_own_request() -> None:
    inner = _model()
    shared = SharedModel(inner)
    fine, doomed = inner.new_sequence(), inner.new_sequence()
    inner.go.clear()
    threading.Timer(0.3, inner.go.set).start()
    out = _on_threads(
        [
            lambda: shared.extend_greedy(fine, [97, 98]),
            lambda: pytest.raises(ContextOverflowError, shared.extend, doomed, [97] * 65),
        ]
    )
    assert out[0].shape == (2,) and fine.tokens == [97, 98] and doomed.tokens == []
    with pytest.raises(ModelError, match="one request at a time"):
        shared.last_hidden()
    shared.close()
    assert inner.live_sequences == 2  # closing the shared view leaves the model as it was


@needs_llama
def test_requests_on_threads_over_a_real_model_decode_as_alone(smollm_path: Path) -> None:
    from coinfer.models.llamacpp import LlamaCppModel

    model = LlamaCppModel(smollm_path, n_ctx=512, n_seq_max=16)
    try:
        prompts = [model.user_prompt(q) for q in ("Name a river.", "Say hi.", "Count to three.")]
        shared = SharedModel(model)
        together = _on_threads([lambda p=p: _decode(shared, p, 12) for p in prompts])
        for prompt, tokens in zip(prompts, together, strict=True):  # greedy, within a batch's rounding
            seq = model.new_sequence()
            rows = model.extend(seq, [*prompt, *tokens[:-1]])[len(prompt) - 1 :]
            model.release(seq)
            for row, token in zip(rows, tokens, strict=True):
                assert row[token] >= row.max() - NEAR_TIE
        assert shared.batches < 3 * 12  # some steps' forwards were decoded together
        assert model.live_sequences == 0
    finally:
        model.close()
