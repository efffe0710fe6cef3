"""Incremental detokenization: deltas never split a UTF-8 character and add up to the whole text.

Pure unit tests use fake byte-level and SentencePiece-like detokenizers; one test runs the
real SmolLM2 tokenizer on llama.cpp, where emoji and CJK characters span several tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from coinfer.decoding.detok import IncrementalDetokenizer
from tests.conftest import HAS_LLAMA

TEXT = "naïve café — 東京 🙂🚀 done"


def _bytes_detok(ids: Sequence[int]) -> str:
    """Each token is one byte."""
    return bytes(ids).decode("utf-8", "replace")


def _push_all(detok: IncrementalDetokenizer, ids: Sequence[int]) -> list[str]:
    return [detok.push(t) for t in ids]


def test_byte_tokens_hold_back_until_the_character_completes() -> None:
    text = "a東🙂b"
    ids = list(text.encode("utf-8"))
    deltas = _push_all(IncrementalDetokenizer(_bytes_detok), ids)
    # 'a' (1 byte), '東' (3 bytes), '🙂' (4 bytes), 'b' (1 byte)
    assert deltas == ["a", "", "", "東", "", "", "", "🙂", "b"]


def test_byte_tokens_round_trip_with_no_replacement_characters() -> None:
    ids = list(TEXT.encode("utf-8"))
    detok = IncrementalDetokenizer(_bytes_detok)
    deltas = _push_all(detok, ids)
    tail = detok.flush()
    assert "".join(deltas) + tail == TEXT
    assert tail == ""
    assert not any("\ufffd" in d for d in deltas)
    # every non-empty delta is exactly one whole character here (one byte token at a time)
    assert [d for d in deltas if d] == list(TEXT)


def test_flush_releases_an_incomplete_character() -> None:
    ids = list(b"x") + list("東".encode())[:2]
    detok = IncrementalDetokenizer(_bytes_detok)
    assert _push_all(detok, ids) == ["x", "", ""]
    assert detok.flush() == "\ufffd"
    assert detok.flush() == ""
    assert _bytes_detok(ids) == "x\ufffd"


def test_invalid_bytes_are_passed_through_as_the_full_decode_shows_them() -> None:
    # a lone continuation byte, a truncated character followed by ASCII, then a valid character
    ids = [0x80, 0x41, 0xE6, 0x42, *"東".encode()]
    detok = IncrementalDetokenizer(_bytes_detok)
    out = "".join(_push_all(detok, ids)) + detok.flush()
    assert out == _bytes_detok(ids) == "\ufffdA\ufffdB東"


def test_stream_can_continue_after_flush() -> None:
    detok = IncrementalDetokenizer(_bytes_detok)
    first = "".join(_push_all(detok, list("ab東".encode()))) + detok.flush()
    second = "".join(_push_all(detok, list("🙂c".encode()))) + detok.flush()
    assert (first, second) == ("ab東", "🙂c")


def test_first_token_leading_space_is_kept_in_context() -> None:
    """SentencePiece-style decoders drop the leading space of the first token they decode.

    Decoding each new token alone would drop the space between words; the window must keep
    a token of context so the deltas still add up to the decode of the whole sequence.
    """
    pieces = ["▁Hello", "▁wor", "ld", "▁and", "▁more", "!", "▁ok"]

    def spm_detok(ids: Sequence[int]) -> str:
        return "".join(pieces[i] for i in ids).replace("▁", " ").removeprefix(" ")

    ids = list(range(len(pieces)))
    detok = IncrementalDetokenizer(spm_detok)
    deltas = _push_all(detok, ids)
    assert "".join(deltas) + detok.flush() == spm_detok(ids) == "Hello world and more! ok"
    assert deltas == ["Hello", " wor", "ld", " and", " more", "!", " ok"]


def test_each_step_decodes_a_short_window() -> None:
    """A stream costs O(n): no call decodes more than a few tokens, however long the stream."""
    seen: list[int] = []

    def counting(ids: Sequence[int]) -> str:
        seen.append(len(ids))
        return _bytes_detok(ids)

    text = ("stream 東京🙂 " * 200).encode()
    detok = IncrementalDetokenizer(counting)
    out = "".join(_push_all(detok, list(text))) + detok.flush()
    assert out == text.decode()
    assert max(seen) <= 8  # the longest held-back run is a 4-byte emoji, plus its context


@pytest.mark.skipif(not HAS_LLAMA, reason="needs llama-cpp-python")
def test_smollm_deltas_add_up_and_never_split_a_character(smollm_llama) -> None:  # type: ignore[no-untyped-def]
    model = smollm_llama
    ids = model.tokenize(TEXT)
    whole = model.detokenize(ids)
    assert whole == TEXT
    # the test is only meaningful if some character spans several tokens
    assert any("\ufffd" in model.detokenize([t]) for t in ids)
    detok = IncrementalDetokenizer(model.detokenize)
    deltas = _push_all(detok, ids)
    tail = detok.flush()
    assert "".join(deltas) + tail == whole
    assert not any("\ufffd" in d for d in deltas + [tail])
    assert "" in deltas  # something was held back
    for ch in "東京🙂🚀":
        assert any(ch in d for d in deltas)
