import pytest

from coinfer.engines.collective.voting import VoteConfig, VoteWeights, majority_vote
from coinfer.errors import ConfigError


def test_the_heaviest_child_wins_level_by_level_as_in_the_papers_figure_5() -> None:
    # "I like apple" (w1), "I like pear" (w2), "I likes ..." (w3): w1 + w2 > w3 picks "like",
    # then w1 > w2 picks "apple"; the output is the first SSM's draft.
    i, like, likes, apple, pear, it = 1, 2, 3, 4, 5, 6
    drafts = [[i, like, apple], [i, like, pear], [i, likes, it]]
    vote = majority_vote(drafts, [0.5, 0.3, 0.6])
    assert vote.tokens == [i, like, apple] and vote.voter == 0
    assert majority_vote(drafts, [0.2, 0.3, 0.6]).voter == 2  # w1 + w2 < w3: "likes" wins


def test_the_walk_goes_to_a_leaf_and_empty_drafts_do_not_vote() -> None:
    assert majority_vote([[1, 2], [1, 2, 3], []], [5.0, 1.0, 9.0]).tokens == [1, 2, 3]
    assert majority_vote([[], []], [1.0, 1.0]).voter == -1
    assert majority_vote([[7, 8], [7, 8]], [1.0, 2.0]).voter == 1  # identical drafts: the heavier SSM
    assert majority_vote([[1], [2]], [1.0, 1.0]).voter == 0  # a tie goes to the earlier draft
    with pytest.raises(ConfigError):
        majority_vote([[1]], [1.0, 2.0])


def test_weights_follow_the_acceptance_rate_thresholds() -> None:
    config = VoteConfig(reward_threshold=0.6, punish_threshold=0.3, reward_factor=2, punish_factor=0.5)
    w = VoteWeights(3, config)
    produced = [1, 2, 3, 9]
    w.record([[1, 2, 3], [1, 2, 8], [5, 5, 5]], voter=0, produced=produced)
    assert w.acceptance_rates() == [1.0, 2 / 3, 0.0]
    assert w.update() == [2.0, 2.0, 0.5] and w.acceptance_rates() == [None, None, None]
    assert w.update() == [2.0, 2.0, 0.5]  # nothing recorded: unchanged


def test_the_papers_rule_scores_only_the_voted_draft() -> None:
    w = VoteWeights(2, VoteConfig(score="voted"))
    w.record([[1, 2], [1, 2]], voter=1, produced=[1, 2, 3])
    assert w.acceptance_rates() == [None, 1.0]


def test_bad_vote_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        VoteConfig(punish_threshold=0.8, reward_threshold=0.5)
    with pytest.raises(ConfigError):
        VoteWeights(2, initial=[1.0, 0.0])
    with pytest.raises(ConfigError):
        VoteWeights(0)
