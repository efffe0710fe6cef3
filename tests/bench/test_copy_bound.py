import pytest

from coinfer.bench.copy_bound import CopyBoundConfig, copy_rounds, summarize
from coinfer.errors import ConfigError
from tests.cli.run import assert_user_error, coinfer

PASSAGE = list(range(10, 40))


def test_an_answer_that_copies_the_prompt_takes_few_rounds() -> None:
    """After the answer's first token (nothing before it to copy from), the lookup finds
    the passage in the prompt and a perfect verifier keeps the rest of it in one round."""
    assert copy_rounds([*PASSAGE, 1, 2], PASSAGE) == 2


def test_an_answer_with_nothing_to_copy_takes_a_round_per_token() -> None:
    assert copy_rounds([*PASSAGE, 1, 2], list(range(100, 120))) == 20


def test_a_round_verifies_at_most_k_draft_tokens() -> None:
    assert copy_rounds([*PASSAGE, 1, 2], PASSAGE, k=10) == 4  # 1, then 11 + 11 + 7 tokens


def test_the_bound_is_output_tokens_over_rounds_per_category_and_overall() -> None:
    rows = [
        {"id": "a", "category": "quote", "tokens": 100, "rounds": 80},
        {"id": "b", "category": "quote", "tokens": 20, "rounds": 20},
        {"id": "c", "category": "edit", "tokens": 100, "rounds": 10},
    ]
    summary = summarize(rows)
    assert summary["quote"] == {"prompts": 2, "tokens": 120, "rounds": 100, "bound": 1.2}
    assert summary["edit"]["bound"] == 10.0
    assert summary["all"] == {"prompts": 3, "tokens": 220, "rounds": 110, "bound": 2.0}


def test_an_unknown_category_is_refused() -> None:
    with pytest.raises(ConfigError, match="poetry"):
        CopyBoundConfig(out="x", categories=("quote", "poetry"))
    assert_user_error(coinfer("bench", "copy-bound", "--categories", "poetry", timeout=60), "poetry")
