"""How llama.cpp with a cache per sequence runs one batch (``models.llamacpp_split``): one
group per row count, each split wherever its streams are not consecutive."""

from __future__ import annotations

import pytest

from coinfer.errors import ModelError
from coinfer.models.llamacpp_split import FreeStreams, equal_groups, split_passes


def test_equal_row_counts_on_consecutive_streams_are_one_pass() -> None:
    assert split_passes([(0, 1), (1, 1), (2, 1), (3, 1)]) == [4]
    assert split_passes([(3, 2), (4, 2), (5, 2)]) == [6]


def test_each_row_count_is_a_pass_and_a_skipped_stream_splits_one() -> None:
    assert split_passes([(0, 1), (1, 1), (2, 4), (3, 4)]) == [2, 8]
    assert split_passes([(0, 4), (2, 4), (4, 4), (6, 4)]) == [4, 4, 4, 4]
    assert split_passes([(0, 1), (1, 1), (2, 1), (4, 1), (5, 1)]) == [3, 2]
    assert split_passes([(5, 3), (1, 1), (0, 1)]) == [2, 3]  # in stream order, whatever the order given
    assert split_passes([(0, 0), (1, 2)]) == [2]  # a sequence with no rows is in no pass


def test_a_prompt_chunk_goes_apart_from_single_tokens() -> None:
    rows = [(7, 10, (0,)), (8, 11, (0,)), (9, 12, (0,)), (5, 40, (1,)), (6, 30, (2,))]
    assert equal_groups(rows) == [[3, 4], [0, 1, 2]]
    assert equal_groups(rows[3:]) == [[0, 1]]  # equal already: one group


def test_a_live_sequence_takes_the_lowest_free_stream_and_a_kept_cache_the_highest() -> None:
    free = FreeStreams(5)
    assert [free.take(), free.take(), free.take()] == [0, 1, 2]
    assert free.take(high=True) == 4 and free.above(2) and not free.above(3)
    free.give(1)
    assert free.below(2) and not free.below(1)
    assert free.take() == 1 and free.take() == 3 and len(free) == 0
    assert not free.above(-1) and not free.below(9)
    with pytest.raises(ModelError, match="sequence slots"):
        free.take()
