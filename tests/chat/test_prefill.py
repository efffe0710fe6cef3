from coinfer.chat.prefill import share_step


def whole(rests: list[int]):
    return lambda i, budget: min(budget, rests[i])


def test_the_shortest_prompts_read_first_and_the_oldest_keeps_half_the_step_until_its_turn():
    rests = [2000, 300, 100, 900]
    plan = share_step(rests, 512, whole(rests))
    # 100, then 156 of the 300, fill what the oldest leaves (512 - 256); 900 gets none of
    # it; the oldest then takes its half
    assert plan == [(2, 100), (1, 156), (0, 256)]
    assert sum(take for _, take in plan) == 512


def test_the_oldest_reads_in_its_turn_when_it_is_among_the_shortest():
    rests = [50, 400, 30]
    assert share_step(rests, 256, whole(rests)) == [(2, 30), (0, 50), (1, 176)]


def test_ties_go_oldest_first():
    rests = [600, 200, 200]
    assert share_step(rests, 512, whole(rests)) == [(1, 200), (2, 56), (0, 256)]


def test_a_prompt_whose_share_makes_no_chunk_waits_but_the_oldest_always_reads():
    rests = [1000, 300]
    none = lambda i, budget: 0  # noqa: E731  (no chunk can be cut in any budget)
    # the other prompt reads nothing; the oldest, given a budget too small to cut, reads uncut
    assert share_step(rests, 512, none) == [(0, 512)]


def test_nothing_being_read_plans_nothing():
    assert share_step([], 512, lambda i, budget: budget) == []
