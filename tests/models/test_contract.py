"""The steerable-model contract, run against every backend (ARCHITECTURE.md).

transformers runs tiny random llama- and qwen2-architecture models built in the test;
llama.cpp runs the real SmolLM2-135M. The same tokens decoded in batches of different
shapes round differently (llama.cpp picks other matmul kernels and quantizes
activations: on SmolLM2 Q4_1 a chain decoded in one batch and token by token differ by
up to ~0.5 in logits), so rows are compared as probabilities with a per-backend
tolerance, and the greedy token must agree exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from coinfer.errors import ConfigError, ContextOverflowError, SequenceError
from coinfer.models import SteerableModel, load_model
from coinfer.models.base import Forward
from tests.conftest import HAS_LLAMA, HAS_TORCH, NEAR_TIE


@dataclass
class Subject:
    model: SteerableModel
    atol: float  # on probabilities
    reference_greedy: Callable[[list[int], int], list[int]]

    def assert_close(self, actual: np.ndarray, expected: np.ndarray) -> None:
        assert actual.shape == expected.shape
        np.testing.assert_allclose(_softmax(actual), _softmax(expected), atol=self.atol)
        rows, want = actual.reshape(-1, actual.shape[-1]), expected.reshape(-1, expected.shape[-1])
        for a, e in zip(rows, want, strict=True):  # the same choice, but where a near-tie flips
            assert a.argmax() == e.argmax() or e.max() - e[a.argmax()] < NEAR_TIE


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _hf_subject(path: Any, kv: str | None = None) -> Subject:
    import torch

    model = load_model(str(path), backend="transformers", kv=kv)

    def reference(prompt: list[int], n: int) -> list[int]:
        out = model.model.generate(  # type: ignore[attr-defined]
            torch.tensor([prompt]), do_sample=False, max_new_tokens=n, min_new_tokens=n
        )
        return [int(t) for t in out[0, len(prompt) :]]

    return Subject(model, 1e-5, reference)


def _llama_subject(model: SteerableModel) -> Subject:
    import llama_cpp
    import llama_cpp.llama_cpp as low

    def reference(prompt: list[int], n: int) -> list[int]:
        # the same CPU buffer setting as the model under test (see cpu_extra_buffers_work)
        default = low.llama_model_default_params

        def params():  # type: ignore[no-untyped-def]
            p = default()
            p.use_extra_bufts = model.extra_buffers  # type: ignore[attr-defined]
            return p

        low.llama_model_default_params = params
        try:
            llm = llama_cpp.Llama(model_path=str(model.path), n_ctx=512, verbose=False)  # type: ignore[attr-defined]
        finally:
            low.llama_model_default_params = default
        try:
            out = []
            for tok in llm.generate(prompt, temp=0.0, top_k=1):
                out.append(int(tok))
                if len(out) == n:
                    break
            return out
        finally:
            llm.close()

    return Subject(model, 5e-2, reference)


PARAMS = [
    pytest.param("hf-llama", marks=pytest.mark.skipif(not HAS_TORCH, reason="needs torch")),
    pytest.param("hf-qwen2", marks=pytest.mark.skipif(not HAS_TORCH, reason="needs torch")),
    pytest.param("hf-static-llama", marks=pytest.mark.skipif(not HAS_TORCH, reason="needs torch")),
    pytest.param("hf-static-qwen2", marks=pytest.mark.skipif(not HAS_TORCH, reason="needs torch")),
    pytest.param("llama.cpp", marks=pytest.mark.skipif(not HAS_LLAMA, reason="needs llama-cpp-python")),
]


@pytest.fixture(scope="module", params=PARAMS)
def subject(request: pytest.FixtureRequest) -> Subject:
    if request.param == "llama.cpp":
        return _llama_subject(request.getfixturevalue("smollm_llama"))
    dirs = request.getfixturevalue("tiny_dirs")
    if request.param.startswith("hf-static-"):  # static caches, the CUDA path's logic run on the CPU
        return _hf_subject(dirs[request.param.removeprefix("hf-static-")], kv="static")
    return _hf_subject(dirs[request.param.removeprefix("hf-")])


def _prompt(model: SteerableModel) -> list[int]:
    return model.chat_prompt([{"role": "user", "content": "def add(a, b):"}])


def _fresh(model: SteerableModel, ids: list[int]) -> np.ndarray:
    seq = model.new_sequence()
    try:
        return model.extend(seq, ids)
    finally:
        model.release(seq)


def test_greedy_one_token_at_a_time_equals_library_generate(subject: Subject) -> None:
    model, prompt, n = subject.model, _prompt(subject.model), 12
    seq = model.new_sequence()
    tokens: list[int] = []
    logits = model.extend(seq, prompt)[-1]
    for _ in range(n):
        tokens.append(int(np.argmax(logits)))
        logits = model.extend(seq, [tokens[-1]])[-1]
    model.release(seq)
    assert tokens == subject.reference_greedy(prompt, n)


def test_extend_returns_logits_for_every_position(subject: Subject) -> None:
    model, prompt = subject.model, _prompt(subject.model)
    seq = model.new_sequence()
    whole = model.extend(seq, prompt)
    assert whole.shape == (len(prompt), model.vocab_size)
    assert whole.dtype == np.float32
    model.release(seq)
    # position i's logits equal a fresh run over the first i + 1 tokens
    part = _fresh(model, prompt[:5])
    subject.assert_close(whole[4], part[-1])
    last = model.extend(s := model.new_sequence(), prompt, last_only=True)
    model.release(s)
    assert last.shape == (1, model.vocab_size)
    subject.assert_close(last[0], whole[-1])


def test_extend_greedy_gives_each_positions_argmax_and_extends_the_cache(subject: Subject) -> None:
    model, prompt = subject.model, _prompt(subject.model)
    a, b = model.new_sequence(), model.new_sequence()
    logits = model.extend(a, prompt)
    before = model.clock.compute_s
    choices = model.extend_greedy(b, prompt)
    assert choices.shape == (len(prompt),)
    assert choices.tolist() == logits.argmax(-1).tolist()
    assert b.tokens == prompt  # the cache holds the chain, as after extend
    after_b, after_a = model.extend(b, [choices[-1]])[0], model.extend(a, [choices[-1]])[0]
    np.testing.assert_allclose(_softmax(after_b), _softmax(after_a), atol=subject.atol)
    if model.backend == "llama.cpp":  # it times its own forwards
        assert model.clock.compute_s > before
    model.release(a)
    model.release(b)


def test_tree_extend_equals_each_branch_alone(subject: Subject) -> None:
    model, prompt = subject.model, _prompt(subject.model)
    a, b, c, d, e = (int(t) for t in np.arange(5) + 40)
    #      a ─ b ─ c          branches: [a b c], [a d], [e]
    #       └─ d
    #      e
    ids, parents = [a, b, c, d, e], [-1, 0, 1, 0, -1]
    seq = model.new_sequence()
    model.extend(seq, prompt)
    tree = model.extend(seq, ids, parents=parents)
    assert tree.shape == (5, model.vocab_size)
    abc = _fresh(model, prompt + [a, b, c])[-3:]
    ad = _fresh(model, prompt + [a, d])[-2:]
    e_alone = _fresh(model, prompt + [e])[-1:]
    expected = np.stack([abc[0], abc[1], abc[2], ad[1], e_alone[0]])
    subject.assert_close(tree, expected)
    model.release(seq)


def test_a_greedy_tree_gives_each_nodes_choice_and_keeps_the_path_committed(subject: Subject) -> None:
    """LLMCad's greedy verification: each tree row's top token (within the tolerance for
    near-ties) and no logits; the tree is pending, and a committed path reads as a chain."""
    model, prompt = subject.model, _prompt(subject.model)
    ids, parents = [40, 41, 42, 43], [-1, 0, -1, 2]
    seq, ref = model.new_sequence(), model.new_sequence()
    model.extend(seq, prompt)
    model.extend(ref, prompt)
    choices = model.extend_greedy(seq, ids, parents=parents)
    rows = model.extend(ref, ids, parents=parents)
    assert choices.shape == (4,) and choices.dtype == np.int64
    for row, choice in zip(rows, choices, strict=True):
        assert row[choice] >= row.max() - 1e-3 * max(1.0, abs(row.max()))
    with pytest.raises(SequenceError, match="pending token tree"):
        model.extend(seq, [44])
    model.commit_path(seq, [2, 3])
    assert seq.tokens == prompt + [42, 43]
    subject.assert_close(model.extend(seq, [44]), _fresh(model, prompt + [42, 43, 44])[-1:])
    model.release(seq)
    model.release(ref)


def test_commit_path_keeps_one_branch(subject: Subject) -> None:
    model, prompt = subject.model, _prompt(subject.model)
    seq = model.new_sequence()
    model.extend(seq, prompt)
    model.extend(seq, [40, 41, 42, 43], parents=[-1, 0, -1, 2])
    model.commit_path(seq, [2, 3])  # keep [42, 43]
    assert seq.tokens == prompt + [42, 43]
    after = model.extend(seq, [44, 45])
    subject.assert_close(after, _fresh(model, prompt + [42, 43, 44, 45])[-2:])
    model.release(seq)


def test_commit_path_of_the_trees_first_nodes_drops_the_others(subject: Subject) -> None:
    model, prompt = subject.model, _prompt(subject.model)
    seq = model.new_sequence()
    model.extend(seq, prompt)
    model.extend(seq, [40, 41, 42], parents=[-1, 0, -1])
    model.commit_path(seq, [0, 1])  # keep [40, 41]: the tree's first nodes
    assert seq.tokens == prompt + [40, 41]
    subject.assert_close(model.extend(seq, [44]), _fresh(model, prompt + [40, 41, 44])[-1:])
    model.release(seq)


def test_truncate_then_extend_equals_a_fresh_sequence(subject: Subject) -> None:
    model, prompt = subject.model, _prompt(subject.model)
    seq = model.new_sequence()
    model.extend(seq, prompt + [40, 41, 42])
    model.truncate(seq, len(prompt) + 1)
    again = model.extend(seq, [50, 51])
    subject.assert_close(again, _fresh(model, prompt + [40, 50, 51])[-2:])
    # a pending tree is dropped by truncate too
    model.extend(seq, [60, 61], parents=[-1, -1])
    model.truncate(seq, len(prompt))
    subject.assert_close(model.extend(seq, [70]), _fresh(model, prompt + [70])[-1:])
    model.release(seq)


def test_sequences_do_not_disturb_each_other(subject: Subject) -> None:
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2 = model.new_sequence(), model.new_sequence()
    model.extend(s1, prompt)
    model.extend(s2, prompt[:3] + [40, 41])
    model.extend(s2, [42], parents=None)
    model.truncate(s2, 2)
    one = model.extend(s1, [43, 44])
    subject.assert_close(one, _fresh(model, prompt + [43, 44])[-2:])
    two = model.extend(s2, [45])
    subject.assert_close(two, _fresh(model, prompt[:2] + [45])[-1:])
    model.release(s1)
    model.release(s2)


def test_fork_starts_an_independent_copy(subject: Subject) -> None:
    """A token tree's branch grows from a fork: the copy and the source each go on as if
    they had been decoded alone, and rolling one back leaves the other's cache whole."""
    model, prompt = subject.model, _prompt(subject.model)
    source = model.new_sequence()
    model.extend(source, prompt)
    branch = model.fork(source)
    assert branch.tokens == prompt and branch.id != source.id
    subject.assert_close(model.extend(branch, [50, 51]), _fresh(model, [*prompt, 50, 51])[-2:])
    model.truncate(source, len(prompt) - 1)
    subject.assert_close(model.extend(source, [42]), _fresh(model, [*prompt[:-1], 42])[-1:])
    subject.assert_close(model.extend(branch, [52]), _fresh(model, [*prompt, 50, 51, 52])[-1:])
    model.extend(branch, [44], parents=[-1])
    with pytest.raises(SequenceError, match="pending token tree"):
        model.fork(branch)
    model.release(branch)
    model.release(source)


def test_a_restored_cache_continues_as_if_its_tokens_were_read(subject: Subject) -> None:
    """A cache copied out to host memory (``save_state``) and back into a new sequence
    (``restore``) gives the logits that reading its tokens gives, to the bit, and leaves
    the source as it was; a blob that is not such a copy is refused and holds no sequence."""
    from coinfer.errors import ModelError
    from coinfer.models.base import SeqState

    model, prompt = subject.model, _prompt(subject.model)
    read = model.new_sequence()
    model.extend(read, prompt)
    state = model.save_state(read)
    assert state is not None and state.tokens == tuple(prompt) and state.nbytes > 0
    restored = model.restore(state)
    assert restored.tokens == prompt and restored.id != read.id
    after_read, after_restore = model.extend(read, [42, 43]), model.extend(restored, [42, 43])
    assert np.array_equal(np.asarray(after_read), np.asarray(after_restore))
    again = model.restore(state)  # the copy stays whole: the sequences it made went on apart
    assert np.array_equal(np.asarray(model.extend(again, [42, 43])), np.asarray(after_read))
    live = model.live_sequences
    with pytest.raises(ModelError, match="restore a saved cache"):
        model.restore(SeqState(tuple(prompt), b"not a saved cache"))
    assert model.live_sequences == live
    for seq in (read, restored, again):
        model.release(seq)


def test_extend_many_equals_separate_extends(subject: Subject) -> None:
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2 = model.new_sequence(), model.new_sequence()
    out = model.extend_many([(s1, prompt), (s2, prompt[:4] + [40])])
    subject.assert_close(out[0], _fresh(model, prompt))
    subject.assert_close(out[1], _fresh(model, prompt[:4] + [40]))
    assert len(s1) == len(prompt) and len(s2) == 5
    model.release(s1)
    model.release(s2)


def test_extend_many_over_caches_of_different_lengths_keeps_each_cache_its_own(subject: Subject) -> None:
    """A batch of requests at different points (speculative verification): each row as if
    alone, and each sequence goes on alone as if it had never been batched."""
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2 = model.new_sequence(), model.new_sequence()
    model.extend(s1, prompt)
    model.extend(s2, prompt[:3])
    out = model.extend_many([(s1, [41, 42]), (s2, [43])])
    subject.assert_close(out[0], _fresh(model, [*prompt, 41, 42])[-2:])
    subject.assert_close(out[1], _fresh(model, [*prompt[:3], 43])[-1:])
    subject.assert_close(model.extend(s2, [44]), _fresh(model, [*prompt[:3], 43, 44])[-1:])
    subject.assert_close(model.extend(s1, [45]), _fresh(model, [*prompt, 41, 42, 45])[-1:])
    model.release(s1)
    model.release(s2)


def test_extend_many_last_only_gives_each_items_last_logits(subject: Subject) -> None:
    """Prefilling several prompts at once keeps one row of logits per prompt."""
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2 = model.new_sequence(), model.new_sequence()
    out = model.extend_many([(s1, prompt), (s2, prompt[:3])], last_only=True)
    assert [o.shape for o in out] == [(1, model.vocab_size)] * 2
    subject.assert_close(out[0], _fresh(model, prompt)[-1:])
    subject.assert_close(out[1], _fresh(model, prompt[:3])[-1:])
    assert len(s1) == len(prompt) and len(s2) == 3
    model.release(s1)
    model.release(s2)


def test_extend_many_greedy_gives_the_top_token_after_each_chain(subject: Subject) -> None:
    """A greedy draft's step: the most likely next token per sequence, each sequence
    extended as by ``extend_many`` (a near-tie may go either way: within the tolerance)."""
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2 = model.new_sequence(), model.new_sequence()
    model.extend(s2, prompt[:3])
    choices = model.extend_many_greedy([(s1, prompt), (s2, [43, 44])])
    assert choices.shape == (2,) and choices.dtype == np.int64
    for choice, context in zip(choices, (prompt, [*prompt[:3], 43, 44]), strict=True):
        fresh = _fresh(model, context)[-1]
        assert fresh[choice] >= fresh.max() - 1e-3 * max(1.0, abs(fresh.max()))
    assert len(s1) == len(prompt) and len(s2) == 5
    subject.assert_close(model.extend(s2, [45]), _fresh(model, [*prompt[:3], 43, 44, 45])[-1:])
    model.release(s1)
    model.release(s2)


def test_extend_many_choices_gives_the_top_token_after_every_token_of_each_chain(subject: Subject) -> None:
    """A batch's greedy verification: each sequence's choice after each of its new tokens
    (as ``argmax`` of ``extend_many``'s rows, within the tolerance for near-ties), each
    sequence extended by its chain."""
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2 = model.new_sequence(), model.new_sequence()
    model.extend(s1, prompt)
    model.extend(s2, prompt[:3])
    out = model.extend_many_choices([(s1, [41, 42, 43]), (s2, [44])])
    assert [(c.shape, c.dtype) for c in out] == [((3,), np.int64), ((1,), np.int64)]
    for choices, context, n in zip(out, ([*prompt, 41, 42, 43], [*prompt[:3], 44]), (3, 1), strict=True):
        fresh = _fresh(model, context)[-n:]
        for row, choice in zip(fresh, choices, strict=True):
            assert row[choice] >= row.max() - 1e-3 * max(1.0, abs(row.max()))
    assert len(s1) == len(prompt) + 3 and len(s2) == 4
    subject.assert_close(model.extend(s1, [45]), _fresh(model, [*prompt, 41, 42, 43, 45])[-1:])
    model.release(s1)
    model.release(s2)


def test_extend_many_next_gives_every_choice_and_only_the_logits_asked_for(subject: Subject) -> None:
    """A mixed batch's step: each sequence's greedy choice, and its last logits only where
    asked (a sampled request's); each sequence extended by its chain."""
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2, s3 = model.new_sequence(), model.new_sequence(), model.new_sequence()
    model.extend(s2, prompt[:3])
    items = [(s1, prompt), (s2, [43, 44]), (s3, prompt[:2])]
    choices, rows = model.extend_many_next(items, [False, True, False])
    assert choices.shape == (3,) and choices.dtype == np.int64
    assert rows[0] is None and rows[2] is None and rows[1] is not None
    assert rows[1].shape == (model.vocab_size,)
    contexts = (prompt, [*prompt[:3], 43, 44], prompt[:2])
    subject.assert_close(rows[1][None], _fresh(model, contexts[1])[-1:])
    for choice, context in zip(choices, contexts, strict=True):
        fresh = _fresh(model, context)[-1]
        assert fresh[choice] >= fresh.max() - 1e-3 * max(1.0, abs(fresh.max()))
    assert [len(s1), len(s2), len(s3)] == [len(prompt), 5, 2]
    with pytest.raises(ConfigError, match="logits_for"):
        model.extend_many_next([(s1, [5])], [True, False])
    for seq in (s1, s2, s3):
        model.release(seq)


def test_extend_many_rows_gives_choices_or_every_rows_logits_as_asked(subject: Subject) -> None:
    """A drafting step of greedy and sampling requests: each sampling one's logits after
    every token of its chain, each greedy one's choices there; each sequence extended."""
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2 = model.new_sequence(), model.new_sequence()
    model.extend_many([(s1, prompt[:3]), (s2, prompt[:4])])
    greedy, sampled = model.extend_many_rows([(s1, prompt[3:6]), (s2, prompt[4:6])], [False, True])
    assert greedy.shape == (3,) and greedy.dtype == np.int64 and sampled.shape == (2, model.vocab_size)
    subject.assert_close(sampled, _fresh(model, prompt[:6])[-2:])
    for i, choice in enumerate(greedy):
        fresh = _fresh(model, prompt[: 4 + i])[-1]
        assert fresh[choice] >= fresh.max() - 1e-3 * max(1.0, abs(fresh.max()))
    assert [len(s1), len(s2)] == [6, 6]
    both_greedy = model.extend_many_rows([(s1, [43]), (s2, [44])], [False, False])
    assert [c.shape for c in both_greedy] == [(1,), (1,)]
    with pytest.raises(ConfigError, match="logits_for"):
        model.extend_many_rows([(s1, [5])], [True, False])
    for seq in (s1, s2):
        model.release(seq)


def test_extend_batch_verifies_several_sequences_chains_and_trees_in_one_call(subject: Subject) -> None:
    """Requests served together (LLMCad's trees, a chain, a greedy verification): each
    result as its sequence alone would give, and each sequence goes on as if alone."""
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2, s3 = model.new_sequence(), model.new_sequence(), model.new_sequence()
    model.extend_many([(s1, prompt), (s2, prompt[:4]), (s3, prompt[:5])])
    ids, parents = [40, 41, 42], [-1, 0, -1]
    tree, chain, greedy = model.extend_batch(
        [
            Forward(s1, ids, parents=parents),
            Forward(s2, [43, 44], last_only=True),
            Forward(s3, [45, 46], greedy=True),
        ]
    )
    ab, c = _fresh(model, [*prompt, 40, 41])[-2:], _fresh(model, [*prompt, 42])[-1:]
    subject.assert_close(tree, np.stack([ab[0], ab[1], c[0]]))
    subject.assert_close(chain, _fresh(model, [*prompt[:4], 43, 44])[-1:])
    expected = _fresh(model, [*prompt[:5], 45, 46])[-2:]
    assert greedy.shape == (2,) and greedy.dtype == np.int64
    for row, choice in zip(expected, greedy, strict=True):
        assert row[choice] >= row.max() - NEAR_TIE
    assert s1.pending is not None and len(s2) == 6 and len(s3) == 7
    model.commit_path(s1, [0, 1])
    subject.assert_close(model.extend(s1, [47]), _fresh(model, [*prompt, 40, 41, 47])[-1:])
    subject.assert_close(model.extend(s2, [47]), _fresh(model, [*prompt[:4], 43, 44, 47])[-1:])
    for s in (s1, s2, s3):
        model.release(s)


def test_a_failed_extend_batch_leaves_every_sequence_as_it_was(subject: Subject) -> None:
    model, prompt = subject.model, _prompt(subject.model)
    s1, s2 = model.new_sequence(), model.new_sequence()
    model.extend(s1, prompt)
    model.extend(s2, prompt)
    with pytest.raises(ContextOverflowError):
        model.extend_batch([Forward(s1, [40]), Forward(s2, [41] * model.n_ctx)])
    with pytest.raises(SequenceError, match="same sequence twice"):
        model.extend_batch([Forward(s1, [40]), Forward(s1, [41])])
    assert s1.tokens == prompt and s2.tokens == prompt and s1.pending is None
    subject.assert_close(model.extend(s1, [42]), model.extend(s2, [42]))
    model.release(s1)
    model.release(s2)


def test_misuse_is_refused_with_a_clear_error(subject: Subject) -> None:
    model = subject.model
    seq = model.new_sequence()
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        model.extend(seq, [model.vocab_size])
    with pytest.raises(ConfigError, match="parent"):
        model.extend(seq, [1, 2], parents=[-1, 1])
    model.extend(seq, [1, 2], parents=[-1, 0])
    with pytest.raises(SequenceError, match="pending token tree"):
        model.extend(seq, [3])
    with pytest.raises(SequenceError, match="root-to-node path"):
        model.commit_path(seq, [1])
    model.commit_path(seq, [])
    assert seq.tokens == []
    with pytest.raises(ContextOverflowError, match="context window"):
        model.extend(seq, [1] * (model.n_ctx + 1))
    model.release(seq)
    with pytest.raises(SequenceError, match="released"):
        model.extend(seq, [1])
    fresh = model.new_sequence()
    with pytest.raises(SequenceError, match="cannot truncate"):
        model.truncate(fresh, 1)
    model.release(fresh)  # the model is shared: a sequence left live would hold a slot
