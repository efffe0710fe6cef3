"""Self-drafting heads: what an untrained head guesses, files that round-trip, and heads
that refuse a model they were not trained for."""

from __future__ import annotations

from pathlib import Path

import pytest

from coinfer.errors import ConfigError
from tests.conftest import needs_torch

pytestmark = needs_torch


def _lm_head(vocab: int = 50, hidden: int = 16, seed: int = 0):  # type: ignore[no-untyped-def]
    import torch

    torch.manual_seed(seed)
    head = torch.nn.Linear(hidden, vocab, bias=False)
    return head.requires_grad_(False)


def test_untrained_heads_guess_the_targets_own_next_token() -> None:
    import torch

    from coinfer.models.heads import DraftHeads

    lm_head = _lm_head()
    heads = DraftHeads.zeros(model="m", digest="d", hidden=16, heads=3)
    hidden = torch.randn(5, 16)
    guesses = heads.guesses(hidden, lm_head, top=2)
    assert guesses.shape == (5, 3, 2)
    own = lm_head(hidden).argmax(-1)
    assert all(torch.equal(guesses[:, k, 0], own) for k in range(3))


def test_heads_round_trip_through_their_files_and_refuse_another_model(tmp_path: Path) -> None:
    import torch

    from coinfer.models.heads import DraftHeads, HeadsMeta

    meta = HeadsMeta("m", "abc", 16, 2, accuracy=[0.5, 0.25], trained={"epochs": 1})
    heads = DraftHeads(torch.randn(2, 16, 16) * 0.1, torch.randn(2, 16) * 0.1, meta)
    heads.save(tmp_path)
    back = DraftHeads.load(tmp_path, digest="abc")
    assert back.meta == meta
    assert torch.allclose(back.weight, heads.weight, atol=1e-3) and torch.allclose(
        back.bias, heads.bias, atol=1e-3
    )
    hidden = torch.randn(4, 16)
    assert torch.equal(back.guesses(hidden, _lm_head()), heads.guesses(hidden, _lm_head()))
    assert back.vocab is None  # trained over every token
    heads.vocab = torch.tensor([3, 7, 40000])
    heads.save(tmp_path)
    assert DraftHeads.load(tmp_path).vocab.tolist() == [3, 7, 40000]
    with pytest.raises(ConfigError, match="trained for m") as exc:
        DraftHeads.load(tmp_path, digest="other")
    assert "train-heads" in (exc.value.hint or "")
    with pytest.raises(ConfigError, match="holds no draft heads"):
        DraftHeads.load(tmp_path / "empty")


def test_decoding_guesses_are_the_best_among_the_heads_vocabulary() -> None:
    import torch

    from coinfer.models.heads import DraftHeads, HeadsMeta

    torch.manual_seed(1)
    meta = HeadsMeta("m", "d", 16, 3)
    heads = DraftHeads(torch.randn(3, 16, 16) * 0.1, torch.randn(3, 16) * 0.1, meta)
    lm_head, hidden = _lm_head(), torch.randn(6, 16)
    assert torch.equal(heads.vocab_guesses(hidden, lm_head, 2), heads.guesses(hidden, lm_head, 2))
    heads.vocab = torch.tensor([4, 9, 17, 30, 41])
    guesses = heads.vocab_guesses(hidden, lm_head, 2)
    scores = heads.logits(hidden, lm_head)[..., heads.vocab]  # (6, 3, 5)
    assert torch.equal(guesses, heads.vocab[scores.topk(2, dim=-1).indices])
    assert set(guesses.flatten().tolist()) <= set(heads.vocab.tolist())
