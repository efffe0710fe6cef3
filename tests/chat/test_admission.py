from __future__ import annotations

from coinfer.chat.admission import WINDOW, next_admitted, passed_over, reads_this_step
from coinfer.chat.job import Job
from coinfer.decoding.sampling import PositionDraws, SamplingParams


def _jobs(*lengths: int) -> list[Job]:
    return [Job(i, [i + 1] * n, 4, SamplingParams(), PositionDraws(0)) for i, n in enumerate(lengths)]


def test_the_fewest_tokens_to_read_go_first_ties_oldest_first() -> None:
    waiting = _jobs(300, 40, 200, 40)
    assert next_admitted(waiting, lambda j: len(j.prompt), due_after=8) is waiting[1]
    # a prompt mostly held by a cache reads few tokens: it goes first
    held = next_admitted(waiting, lambda j: 10 if j is waiting[0] else len(j.prompt), due_after=8)
    assert held is waiting[0]


def test_a_job_that_must_wait_for_a_shared_read_is_passed_and_none_goes_when_all_must() -> None:
    waiting = _jobs(300, 40, 200)
    sharing = next_admitted(waiting, lambda j: None if j is waiting[1] else len(j.prompt), due_after=8)
    assert sharing is waiting[2]
    assert next_admitted(waiting, lambda j: None, due_after=8) is None
    assert next_admitted([], lambda j: 0, due_after=8) is None


def test_a_job_passed_over_a_batchs_worth_of_times_goes_next_and_nothing_goes_past_it() -> None:
    waiting = _jobs(300, 40, 20)
    passed_over(waiting, waiting[2])
    assert [j.passed for j in waiting] == [1, 1, 0]  # only the jobs older than the admitted one
    passed_over(waiting, waiting[1])
    assert waiting[0].passed == 2
    assert next_admitted(waiting, lambda j: len(j.prompt), due_after=2) is waiting[0]
    # the due job must wait for a shared read: no shorter one goes past it meanwhile
    assert next_admitted(waiting, lambda j: None if j is waiting[0] else 1, due_after=2) is None


def test_only_the_oldest_window_of_batches_are_priced() -> None:
    waiting = _jobs(*([300] * (WINDOW * 2)), 10)  # the short one is past the window of 2 * WINDOW
    priced: list[Job] = []

    def to_read(job: Job) -> int:
        priced.append(job)
        return len(job.prompt)

    assert next_admitted(waiting, to_read, due_after=2) is waiting[0]
    assert priced == waiting[: WINDOW * 2]
    assert next_admitted(waiting[1:], lambda j: len(j.prompt), due_after=2) is waiting[-1]


def test_a_job_is_admitted_only_where_the_steps_reading_reaches_it() -> None:
    chunk = 512
    assert reads_this_step(900, [], chunk)  # nothing being read: any prompt starts
    # the prompts being read go shortest first: 300 and 200 (the oldest) take 500 before a 400
    assert reads_this_step(400, [200, 300], chunk)
    assert not reads_this_step(400, [200, 300, 100], chunk)  # 600 ahead of it
    # a longer prompt read after it takes nothing from it: a short one goes in beside long ones
    assert reads_this_step(20, [2000, 1500, 1800], chunk)
    # the oldest keeps half the step until its turn, however long it is
    assert reads_this_step(200, [2000, 100], chunk)
    assert not reads_this_step(200, [2000, 100, 160], chunk)  # 256 + 100 + 160 ahead
    assert not reads_this_step(600, [512], chunk)  # the oldest, shorter, takes the whole step
