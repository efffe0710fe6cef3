"""Plain generation: greedy equals transformers' own generate, budgets, stops, streaming, stats.

A tiny random llama-architecture model runs the real transformers backend; a scripted
fake ``SteerableModel`` (byte tokens, chosen next tokens) forces end-of-turn and context
limits exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest

from coinfer.decoding.generate import generate, generate_tokens, stream_generate
from coinfer.decoding.sampling import SamplingParams
from coinfer.errors import ConfigError, ContextOverflowError
from coinfer.models import ChatTemplate, Seq, SteerableModel, load_model
from tests.conftest import HAS_TORCH

EOS = 256


class ScriptedModel(SteerableModel):
    """Tokens 0..255 are bytes, 256 is end of turn; ``next_token(prefix)`` picks the greedy token."""

    name = "scripted"
    backend = "fake"
    vocab_size = 257
    eos_ids = frozenset({EOS})
    template = ChatTemplate(source=None)

    def __init__(self, next_token: Callable[[list[int]], int], *, n_ctx: int = 64) -> None:
        super().__init__()
        self.next_token = next_token
        self.n_ctx = n_ctx
        self.released: list[int] = []

    def tokenize(self, text: str, *, special: bool = False, add_bos: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def detokenize(self, ids: Sequence[int]) -> str:
        """Byte runs decoded as UTF-8; the end-of-turn token rendered as ``</s>``."""
        out, run = [], bytearray()
        for t in ids:
            if t == EOS:
                out += [run.decode("utf-8", "replace"), "</s>"]
                run.clear()
            else:
                run.append(t)
        return "".join([*out, run.decode("utf-8", "replace")])

    def _extend(self, seq: Seq, ids: list[int], parents: list[int] | None, last_only: bool) -> np.ndarray:
        assert parents is None
        rows = []
        for j in range(len(ids)):
            row = np.zeros(self.vocab_size, dtype=np.float32)
            row[self.next_token(seq.tokens + ids[: j + 1])] = 10.0
            rows.append(row)
        return np.stack(rows[-1:] if last_only else rows)

    def _commit_path(self, seq: Seq, path: list[int]) -> None:
        raise NotImplementedError

    def _truncate(self, seq: Seq, length: int) -> None:
        raise NotImplementedError

    def _release(self, seq: Seq) -> None:
        self.released.append(seq.id)


def _script(prompt_len: int, out: Sequence[int], then: int = ord("z")) -> Callable[[list[int]], int]:
    """Emit ``out`` after the prompt, then ``then`` forever."""

    def next_token(prefix: list[int]) -> int:
        i = len(prefix) - prompt_len
        return out[i] if 0 <= i < len(out) else then

    return next_token


# ---- the scripted model ----------------------------------------------------------------


def test_scripted_eos_stops_and_is_not_in_the_output() -> None:
    prompt = list(b"Q: ")
    answer = list("hi 東🙂".encode())
    model = ScriptedModel(_script(len(prompt), [*answer, EOS, *b"after"]))
    assert model.detokenize([*answer, EOS]).endswith("</s>")  # EOS would show up as text
    r = generate(model, prompt, max_tokens=50)
    assert r.finish_reason == "stop"
    assert r.tokens == answer
    assert EOS not in r.tokens
    assert r.text == "hi 東🙂"
    assert "</s>" not in r.text
    assert r.stats.n_tokens == len(answer)
    assert r.stats.prompt_tokens == len(prompt)
    # the raw token stream yields the EOS last, and nothing after it
    assert list(generate_tokens(model, prompt, max_tokens=50)) == [*answer, EOS]
    assert model.released  # sequences are released


def test_scripted_stream_deltas_and_finish_reasons() -> None:
    prompt = list(b">")
    answer = list("a東🙂b".encode())
    model = ScriptedModel(_script(len(prompt), [*answer, EOS]))
    responses = list(stream_generate(model, prompt, max_tokens=50))
    assert [r.finish_reason for r in responses] == [None] * len(answer) + ["stop"]
    assert [r.token for r in responses] == [*answer, None]
    assert [r.text for r in responses] == ["a", "", "", "東", "", "", "", "🙂", "b", ""]
    assert "".join(r.text for r in responses) == generate(model, prompt, max_tokens=50).text


def test_eos_on_the_last_budgeted_token_is_a_stop() -> None:
    prompt = list(b">")
    model = ScriptedModel(_script(len(prompt), [*b"abc", EOS]))
    r = generate(model, prompt, max_tokens=4)
    assert (r.tokens, r.finish_reason) == (list(b"abc"), "stop")
    r = generate(model, prompt, max_tokens=3)
    assert (r.tokens, r.finish_reason) == (list(b"abc"), "length")


def test_generation_fills_the_context_and_stops_with_length() -> None:
    model = ScriptedModel(_script(3, []), n_ctx=8)
    r = generate(model, list(b"abc"), max_tokens=100)
    assert r.finish_reason == "length"
    assert len(r.tokens) == model.n_ctx - 3
    # a prompt one short of the window still gives one token
    r = generate(model, list(b"abcdefg"), max_tokens=100)
    assert (len(r.tokens), r.finish_reason) == (1, "length")


@pytest.mark.parametrize("extra", [0, 1, 10])
def test_scripted_prompt_at_or_over_the_window_overflows(extra: int) -> None:
    model = ScriptedModel(_script(0, []), n_ctx=8)
    with pytest.raises(ContextOverflowError):
        generate(model, [65] * (8 + extra), max_tokens=3)


def test_empty_prompt_is_a_config_error() -> None:
    model = ScriptedModel(_script(0, []))
    with pytest.raises(ConfigError):
        generate(model, [], max_tokens=3)


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
    r = generate(tiny, prompt, max_tokens=n)
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
    r = generate(tiny, prompt, max_tokens=max_tokens)
    assert len(r.tokens) == max_tokens
    assert r.finish_reason == "length"
    assert r.stats.n_tokens == max_tokens
    # the budget only cuts: the first tokens are those of a longer run
    assert generate(tiny, prompt, max_tokens=max_tokens + 3).tokens[:max_tokens] == r.tokens


@needs_torch
@pytest.mark.parametrize("max_tokens", [0, -1])
def test_max_tokens_below_one_is_a_config_error(tiny, prompt, max_tokens: int) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError):
        generate(tiny, prompt, max_tokens=max_tokens)
    with pytest.raises(ConfigError):
        list(stream_generate(tiny, prompt, max_tokens=max_tokens))


@needs_torch
@pytest.mark.parametrize("extra", [0, 5])
def test_prompt_filling_the_window_overflows(tiny, extra: int) -> None:  # type: ignore[no-untyped-def]
    n = tiny.n_ctx + extra
    with pytest.raises(ContextOverflowError) as info:
        generate(tiny, [5] * n, max_tokens=4)
    message = str(info.value)
    assert str(n) in message
    assert str(tiny.n_ctx) in message


@needs_torch
def test_stream_deltas_add_up_to_the_final_text(tiny, prompt) -> None:  # type: ignore[no-untyped-def]
    sampling = SamplingParams(temperature=1.0, seed=11)
    responses = list(stream_generate(tiny, prompt, max_tokens=24, sampling=sampling))
    final = generate(tiny, prompt, max_tokens=24, sampling=sampling)
    assert final.tokens == responses[-1].tokens
    assert "".join(r.text for r in responses) == final.text == tiny.detokenize(final.tokens)
    assert responses[-1].finish_reason == final.finish_reason
    assert all(r.finish_reason is None for r in responses[:-1])
    assert [r.token for r in responses[:-1]] == final.tokens


@needs_torch
def test_stats(tiny, prompt) -> None:  # type: ignore[no-untyped-def]
    r = generate(tiny, prompt, max_tokens=8)
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
        return generate(tiny, prompt, max_tokens=20, sampling=sampling).tokens

    a = run(1)
    assert len(a) >= 5
    assert run(1) == a
    others = [run(seed) for seed in (2, 3)]
    assert all(o != a for o in others)
    assert others[0] != others[1]


@needs_torch
def test_top_k_one_sampling_is_greedy(tiny, prompt) -> None:  # type: ignore[no-untyped-def]
    greedy = generate(tiny, prompt, max_tokens=12).tokens
    sampled = generate(tiny, prompt, max_tokens=12, sampling=SamplingParams(temperature=2.0, top_k=1, seed=5))
    assert sampled.tokens == greedy
