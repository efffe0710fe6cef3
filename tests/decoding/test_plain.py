"""Plain decoding (the speculative engine with no drafter): greedy equals transformers'
own generate, budgets, stops, streaming, stats.

A tiny random llama-architecture model runs the real transformers backend; the scripted
fake ``SteerableModel`` of ``coinfer.testing`` (byte tokens, chosen next tokens) forces
end-of-turn and context limits exactly.
"""

from __future__ import annotations

import pytest

from coinfer.decoding import SamplingParams, SpecConfig, stream
from coinfer.errors import ConfigError, ContextOverflowError
from coinfer.models import load_model
from coinfer.testing import EOS, ScriptedModel, script
from tests.conftest import HAS_TORCH, plain


def generate(model, prompt, max_tokens, sampling=None):  # type: ignore[no-untyped-def]
    return plain(model, prompt, max_tokens, sampling)


def stream_plain(model, prompt, max_tokens, sampling=None):  # type: ignore[no-untyped-def]
    config = SpecConfig(max_tokens=max_tokens, sampling=sampling or SamplingParams())
    return stream(model, prompt, draft=None, config=config)


# ---- the scripted model ----------------------------------------------------------------


def test_scripted_eos_stops_and_is_not_in_the_output() -> None:
    prompt = list(b"Q: ")
    answer = list("hi 東🙂".encode())
    model = ScriptedModel(script(len(prompt), [*answer, EOS, *b"after"]))
    assert model.detokenize([*answer, EOS]).endswith("</s>")  # EOS would show up as text
    r = generate(model, prompt, 50)
    assert r.finish_reason == "stop"
    assert r.tokens == answer
    assert EOS not in r.tokens
    assert r.text == "hi 東🙂"
    assert "</s>" not in r.text
    assert r.stats.n_tokens == len(answer)
    assert r.stats.prompt_tokens == len(prompt)
    # one forward for the prompt, then one per token up to the end of turn, and no more
    assert r.stats.target_forwards == len(answer) + 1 and r.stats.drafted == 0
    assert model.forwards == [len(prompt)] + [1] * len(answer)
    assert model.released  # sequences are released


def test_scripted_stream_deltas_and_finish_reasons() -> None:
    prompt = list(b">")
    answer = list("a東🙂b".encode())
    model = ScriptedModel(script(len(prompt), [*answer, EOS]))
    responses = list(stream_plain(model, prompt, 50))
    assert [r.finish_reason for r in responses] == [None] * len(answer) + ["stop"]
    assert [r.tokens for r in responses] == [[t] for t in answer] + [[]]
    assert [r.text for r in responses] == ["a", "", "", "東", "", "", "", "🙂", "b", ""]
    assert "".join(r.text for r in responses) == generate(model, prompt, 50).text


def test_eos_on_the_last_budgeted_token_is_a_stop() -> None:
    prompt = list(b">")
    model = ScriptedModel(script(len(prompt), [*b"abc", EOS]))
    r = generate(model, prompt, 4)
    assert (r.tokens, r.finish_reason) == (list(b"abc"), "stop")
    r = generate(model, prompt, 3)
    assert (r.tokens, r.finish_reason) == (list(b"abc"), "length")


def test_generation_fills_the_context_and_stops_with_length() -> None:
    model = ScriptedModel(script(3, []), n_ctx=8)
    r = generate(model, list(b"abc"), 100)
    assert r.finish_reason == "length"
    assert len(r.tokens) == model.n_ctx - 3
    # a prompt one short of the window still gives one token
    r = generate(model, list(b"abcdefg"), 100)
    assert (len(r.tokens), r.finish_reason) == (1, "length")


@pytest.mark.parametrize("extra", [0, 1, 10])
def test_scripted_prompt_at_or_over_the_window_overflows(extra: int) -> None:
    model = ScriptedModel(script(0, []), n_ctx=8)
    with pytest.raises(ContextOverflowError):
        generate(model, [65] * (8 + extra), 3)


def test_empty_prompt_is_a_config_error() -> None:
    model = ScriptedModel(script(0, []))
    with pytest.raises(ConfigError):
        generate(model, [], 3)


# ---- the tiny transformers model -------------------------------------------------------

needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch and transformers")


@pytest.fixture(scope="module")
def tiny(tiny_dirs):  # type: ignore[no-untyped-def]
    model = load_model(str(tiny_dirs["llama"]), backend="transformers")
    yield model
    model.close()


@pytest.fixture(scope="module")
def prompt(tiny) -> list[int]:  # type: ignore[no-untyped-def]
    return tiny.chat_prompt([{"role": "user", "content": "def add(a, b):"}])


@needs_torch
def test_greedy_equals_transformers_generate(tiny, prompt) -> None:  # type: ignore[no-untyped-def]
    import torch

    n = 10
    ref_out = tiny.model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, min_new_tokens=n)
    reference = [int(t) for t in ref_out[0, len(prompt) :]]
    assert len(reference) == n
    r = generate(tiny, prompt, n)
    # min_new_tokens masks EOS in the reference: where we stop at EOS, compare up to it
    if r.finish_reason == "stop":
        assert 0 < len(r.tokens) < n
        assert r.tokens == reference[: len(r.tokens)]
    else:
        assert r.tokens == reference
    assert not tiny.eos_ids & set(r.tokens)
    assert r.text == tiny.detokenize(r.tokens)


@needs_torch
@pytest.mark.parametrize("max_tokens", [1, 7])
def test_max_tokens_is_respected(tiny, prompt, max_tokens: int) -> None:  # type: ignore[no-untyped-def]
    r = generate(tiny, prompt, max_tokens)
    assert len(r.tokens) == max_tokens
    assert r.finish_reason == "length"
    assert r.stats.n_tokens == max_tokens
    # the budget only cuts: the first tokens are those of a longer run
    assert generate(tiny, prompt, max_tokens + 3).tokens[:max_tokens] == r.tokens


@needs_torch
@pytest.mark.parametrize("max_tokens", [0, -1])
def test_max_tokens_below_one_is_a_config_error(tiny, prompt, max_tokens: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="max_tokens must be at least 1"):
        SpecConfig(max_tokens=max_tokens)


@needs_torch
@pytest.mark.parametrize("extra", [0, 5])
def test_prompt_filling_the_window_overflows(tiny, extra: int) -> None:  # type: ignore[no-untyped-def]
    n = tiny.n_ctx + extra
    with pytest.raises(ContextOverflowError) as info:
        generate(tiny, [5] * n, 4)
    message = str(info.value)
    assert str(n) in message
    assert str(tiny.n_ctx) in message


@needs_torch
def test_stream_deltas_add_up_to_the_final_text(tiny, prompt) -> None:  # type: ignore[no-untyped-def]
    sampling = SamplingParams(temperature=1.0, seed=11)
    responses = list(stream_plain(tiny, prompt, 24, sampling))
    final = generate(tiny, prompt, 24, sampling)
    assert final.tokens == [t for r in responses for t in r.tokens]
    assert "".join(r.text for r in responses) == final.text == tiny.detokenize(final.tokens)
    assert responses[-1].finish_reason == final.finish_reason
    assert all(r.finish_reason is None for r in responses[:-1])
    assert [len(r.tokens) for r in responses[:-1]] == [1] * (len(responses) - 1)


@needs_torch
def test_stats(tiny, prompt) -> None:  # type: ignore[no-untyped-def]
    r = generate(tiny, prompt, 8)
    s = r.stats
    assert s.n_tokens == len(r.tokens) == 8
    assert s.prompt_tokens == len(prompt)
    assert s.ttft_s > 0
    assert s.total_s >= s.ttft_s
    assert s.tokens_per_s > 0
    assert s.tokens_per_s == pytest.approx(s.n_tokens / s.total_s)
    assert s.decode_tokens_per_s > 0
    d = s.as_dict()
    assert d["n_tokens"] == 8 and d["prompt_tokens"] == len(prompt)


@needs_torch
def test_sampling_is_reproducible_with_a_seed(tiny, prompt) -> None:  # type: ignore[no-untyped-def]
    def run(seed: int) -> list[int]:
        sampling = SamplingParams(temperature=1.5, seed=seed)
        return generate(tiny, prompt, 20, sampling).tokens

    a = run(1)
    assert len(a) >= 5
    assert run(1) == a
    others = [run(seed) for seed in (2, 3)]
    assert all(o != a for o in others)
    assert others[0] != others[1]


@needs_torch
def test_top_k_one_sampling_is_greedy(tiny, prompt) -> None:  # type: ignore[no-untyped-def]
    greedy = generate(tiny, prompt, 12).tokens
    sampled = generate(tiny, prompt, 12, SamplingParams(temperature=2.0, top_k=1, seed=5))
    assert sampled.tokens == greedy
