import pytest

from coinfer.bench.copy_bound import CopyBoundConfig, copy_rounds, summarize
from coinfer.errors import ConfigError
from tests.cli.run import assert_user_error, coinfer

PASSAGE = list(range(10, 40))


def test_an_answer_that_copies_the_prompt_takes_few_rounds() -> None:
    """After the answer's first token (nothing before it to copy from), the lookup finds
    the passage in the prompt and a perfect verifier keeps the rest of it in one round."""
    assert copy_rounds([*PASSAGE, 1, 2], PASSAGE) == [0, 28]


def test_an_answer_with_nothing_to_copy_takes_a_round_per_token() -> None:
    assert copy_rounds([*PASSAGE, 1, 2], list(range(100, 120))) == [0] * 20


def test_a_round_verifies_at_most_k_draft_tokens() -> None:
    assert copy_rounds([*PASSAGE, 1, 2], PASSAGE, k=10) == [0, 10, 10, 6]  # 1, then 11 + 11 + 7 tokens


def test_the_bound_is_output_tokens_over_rounds_and_on_a_machine_over_their_cost() -> None:
    rows = [
        {"id": "a", "category": "quote", "tokens": 12, "kept": [0, 0, 9, 0]},  # one quoted line
        {"id": "b", "category": "edit", "tokens": 20, "kept": [0, 18]},
    ]
    curve = {1: 10.0, 2: 12.0, 10: 30.0, 19: 50.0}  # ms of a forward over n tokens
    summary = summarize(rows, curve)
    priced = 3 + 30 / 10  # three one-token forwards and one over 10 tokens, in one-token forwards
    assert summary["quote"] == {"prompts": 1, "tokens": 12, "rounds": 4, "bound": 3.0,
                                "bound_on_this_machine": round(12 / priced, 3)}  # fmt: skip
    assert summary["edit"]["bound_on_this_machine"] == round(20 / 6.0, 3)
    assert summary["all"]["rounds"] == 6 and summary["all"]["bound"] == round(32 / 6, 3)
    assert summarize(rows)["quote"]["bound_on_this_machine"] is None  # nothing measured
    steep = {1: 10.0, 2: 12.0, 10: 300.0, 19: 500.0}  # where five forwards of 2 beat one of 10
    assert summarize(rows[:1], steep)["quote"]["bound_on_this_machine"] == round(12 / (3 + 60 / 10), 3)


def test_an_unknown_category_is_refused() -> None:
    with pytest.raises(ConfigError, match="poetry"):
        CopyBoundConfig(out="x", categories=("quote", "poetry"))
    assert_user_error(coinfer("bench", "copy-bound", "--categories", "poetry", timeout=60), "poetry")
