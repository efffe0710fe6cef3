"""Speculative decoding inside a continuous batch (``decoding.batch_speculation`` through
``chat.LocalChat``): every greedy request drafts, one forward verifies the whole batch, and
each request's text is the target's greedy text."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence

import numpy as np

from coinfer.chat import LocalChat
from coinfer.decoding.batch_shape import Passes
from coinfer.decoding.batch_speculation import BatchSpeculator, DraftingGate, accepted_length, width_bucket
from coinfer.decoding.draft_length import CostCurve, DraftSizer, FixedDraftLength
from coinfer.decoding.ngram import NgramDrafter
from coinfer.decoding.sampling import SamplingParams
from coinfer.models.base import Seq
from coinfer.models.llamacpp_split import split_passes
from coinfer.testing import EOS, ScriptedModel

PATTERN = [40, 41, 42, 43, 44, 45]


def _cyclic(prefix: list[int]) -> int:
    """A target that repeats ``PATTERN`` after its last token, and ends after 70 tokens."""
    if len(prefix) >= 70:
        return EOS
    last = prefix[-1] if prefix else PATTERN[-1]
    return PATTERN[(PATTERN.index(last) + 1) % len(PATTERN)] if last in PATTERN else PATTERN[0]


PROMPTS = [[7, 8, *PATTERN, *PATTERN], [9, *PATTERN[:3]], [5, 6, 7, 44], [3, *PATTERN * 2, 41]]


def _serve(
    chat: LocalChat, *, max_tokens: int = 40, speculate: bool = True, temperature: float = 0.0
) -> list:
    params = SamplingParams(temperature=temperature, seed=1 if temperature else None)
    jobs = [
        j
        for i, p in enumerate(PROMPTS)
        for j in chat.new_jobs(i, list(p), n=1, max_tokens=max_tokens, params=params, speculate=speculate)
    ]
    waiting, running = deque(jobs), []
    while waiting or running:
        running = chat.step(waiting, running)
    return jobs


def test_the_agreed_prefix_of_a_draft_is_kept() -> None:
    assert accepted_length([1, 2, 3], [1, 2, 9, 4]) == 2
    assert accepted_length([1, 2], [1, 2, 3]) == 2 and accepted_length([5], [1, 5]) == 0
    assert accepted_length([], [7]) == 0


def test_a_batch_that_drafts_writes_the_targets_greedy_text_in_fewer_forwards() -> None:
    model = ScriptedModel(_cyclic, n_ctx=256)
    plain = _serve(LocalChat(model, max_concurrent=4, keep=0))
    plain_forwards = len(model.forwards)
    chat = LocalChat(model, max_concurrent=4, keep=0)
    chat.speculator = BatchSpeculator(NgramDrafter(), DraftSizer(FixedDraftLength(4)))
    drafted = _serve(chat)
    assert [j.tokens for j in drafted] == [j.tokens for j in plain]  # lossless, every request
    assert [j.finish for j in drafted] == [j.finish for j in plain] == ["length"] * 4
    assert all(j.accepted > 0 and j.accepted <= j.drafted for j in drafted)
    assert len(model.forwards) - plain_forwards < plain_forwards  # several tokens a forward
    assert model.live_sequences == 0  # every sequence released


def test_an_end_token_inside_an_agreed_draft_ends_the_request_there() -> None:
    model = ScriptedModel(_cyclic, n_ctx=256)
    plain = _serve(LocalChat(model, max_concurrent=2, keep=0), max_tokens=80)
    chat = LocalChat(model, max_concurrent=2, keep=0)
    chat.speculator = BatchSpeculator(NgramDrafter(), DraftSizer(FixedDraftLength(8)))
    drafted = _serve(chat, max_tokens=80)
    assert [j.tokens for j in drafted] == [j.tokens for j in plain]
    assert all(j.finish == "stop" and EOS not in j.tokens for j in drafted)
    assert model.live_sequences == 0


def test_requests_that_do_not_speculate_share_the_batch_without_drafts() -> None:
    model = ScriptedModel(_cyclic, n_ctx=256)
    chat = LocalChat(model, max_concurrent=4, keep=0)
    chat.speculator = BatchSpeculator(NgramDrafter(), DraftSizer(FixedDraftLength(4)))
    assert all(j.drafted == 0 for j in _serve(chat, speculate=False))
    assert model.live_sequences == 0


def _mostly_cyclic(prefix: list[int]) -> int | dict[int, float]:
    """``_cyclic``'s token with probability 0.8, another with 0.2: a sampled text copies
    the pattern for a while, then leaves it."""
    token = _cyclic(prefix)
    return token if token == EOS else {token: 0.8, 7 + len(prefix) % 5: 0.2}


def test_requests_that_sample_draft_and_write_what_plain_sampling_draws_from_their_seed() -> None:
    model = ScriptedModel(_mostly_cyclic, n_ctx=256)
    plain = _serve(LocalChat(model, max_concurrent=4, keep=0), temperature=0.9)
    plain_forwards = len(model.forwards)
    chat = LocalChat(model, max_concurrent=4, keep=0)
    chat.speculator = BatchSpeculator(NgramDrafter(), DraftSizer(FixedDraftLength(4)))
    drafted = _serve(chat, temperature=0.9)
    assert [j.tokens for j in drafted] == [j.tokens for j in plain]  # the same draws, one a token
    assert len({tuple(j.tokens) for j in drafted}) > 1 and any(t not in PATTERN for t in drafted[0].tokens)
    assert all(j.accepted > 0 for j in drafted) and any(j.accepted < j.drafted for j in drafted)
    assert len(model.forwards) - plain_forwards < plain_forwards  # several tokens a forward
    assert model.live_sequences == 0


def test_greedy_requests_still_draft_beside_one_that_samples() -> None:
    model = ScriptedModel(_cyclic, n_ctx=256)
    chat = LocalChat(model, max_concurrent=4, keep=0)
    chat.speculator = BatchSpeculator(NgramDrafter(), DraftSizer(FixedDraftLength(4)))
    greedy = SamplingParams()
    jobs = [
        j
        for i, p in enumerate(PROMPTS[:3])
        for j in chat.new_jobs(i, list(p), n=1, max_tokens=40, params=greedy)
    ]
    grammar = chat.new_jobs(
        3, list(PROMPTS[3]), n=1, max_tokens=40, params=SamplingParams(temperature=0.7, seed=3)
    )
    grammar[0].speculate = False  # as a job under a grammar: it samples and does not draft
    waiting, running = deque([*jobs, *grammar]), []
    while waiting or running:
        running = chat.step(waiting, running)
    alone = _serve(LocalChat(ScriptedModel(_cyclic, n_ctx=256), max_concurrent=4, keep=0))
    assert [j.tokens for j in jobs] == [j.tokens for j in alone[:3]]
    assert all(j.accepted > 0 for j in jobs) and grammar[0].drafted == 0 and len(grammar[0].tokens) == 40
    assert model.live_sequences == 0


def test_an_adaptive_speculator_measures_plain_forwards_before_it_drafts() -> None:
    model = ScriptedModel(_cyclic, n_ctx=256)
    costs = CostCurve()
    chat = LocalChat(model, max_concurrent=4, keep=0)
    chat.speculator = BatchSpeculator.over(NgramDrafter(), costs, batch_floor=0.0)
    jobs = _serve(chat)
    assert 4 in costs  # a plain forward of the four requests, measured
    assert all(len(j.tokens) == 40 for j in jobs)


def test_the_speculative_engines_batch_floor_is_its_configs() -> None:
    import pytest

    from coinfer.decoding.registry import get
    from coinfer.decoding.speculative import SpecConfig
    from coinfer.errors import ConfigError

    model = ScriptedModel(lambda prefix: 97, n_ctx=256)
    with get("speculative").open({"target": model}, SpecConfig(batch_floor=0.5)) as session:
        speculator = session.speculator()
        assert speculator is not None and speculator.sizer.policy.batch_floor == 0.5
    with get("speculative").open({"target": model}, SpecConfig()) as session:  # served: the batch's best cut
        speculator = session.speculator()
        assert speculator is not None and speculator.sizer.policy.batch_floor == 0.0
    with pytest.raises(ConfigError, match="batch_floor"):
        SpecConfig(batch_floor=1.5)


def test_a_served_batch_bets_further_on_a_fresh_deep_copy_only_in_steps_of_two_or_more() -> None:
    """The served speculator prices copies by the drafter's fitted miss (``BATCH_COPY_MISS``)
    in a step of two or more requests; a step of one keeps the cautious default, as one
    request alone does. Before either has a record, a copy matched over 32 tokens is
    expected to hold further in a wide step."""
    from coinfer.decoding.batch_speculation import BATCH_COPY_MISS
    from coinfer.decoding.draft_length import AdaptiveDraftLength, CopyBucket

    batch = BatchSpeculator.over(NgramDrafter(), CostCurve(), batch_floor=0.0).sizer.policy
    alone = AdaptiveDraftLength()
    assert isinstance(batch, AdaptiveDraftLength)
    deep = CopyBucket(32, True)
    batch.trim_together([(8, deep)])  # a step of one request
    assert batch.step_copy_miss() == alone.copy_miss
    assert batch.expected_tokens(32, deep) == alone.expected_tokens(32, deep)
    batch.trim_together([(8, deep), (0, None), (0, None)])  # a step of three
    assert batch.step_copy_miss() == BATCH_COPY_MISS < alone.copy_miss
    assert batch.expected_tokens(32, deep) > alone.expected_tokens(32, deep)


def test_the_gate_keeps_a_width_plain_once_drafting_measured_slower_there() -> None:
    gate = DraftingGate(warmup=2, probe_every=4)
    for _ in range(2):  # drafting is measured first, then plain
        assert gate.drafting(4)
        gate.observe(4, True, 6, 1.0)
    for _ in range(2):
        assert not gate.drafting(4)
        gate.observe(4, False, 8, 1.0)
    choices = [gate.drafting(4) for _ in range(8)]
    assert choices.count(True) == 2 and choices[3] and choices[7]  # a probe every fourth step
    assert gate.drafting(1) and gate.drafting(3)  # another width has its own measurements
    gate.observe(4, True, 40, 1.0)  # a probe that paid lifts drafting's average above plain
    gate.observe(4, True, 40, 1.0)
    assert gate.drafting(4) and gate.rates()["4:plain"] == 8.0


def test_widths_up_to_eight_are_measured_apart_and_wider_ones_by_powers_of_two() -> None:
    """A plain step of 3 requests gives fewer tokens than one of 4 for nearly its cost: in
    one bucket, width-3 plain steps lowered plain's rate and let losing drafts through."""
    gate = DraftingGate(warmup=1)
    gate.observe(4, True, 9, 1.0)
    gate.observe(4, False, 10, 1.0)
    gate.observe(3, True, 9, 1.0)
    gate.observe(3, False, 8, 1.0)
    assert not gate.drafting(4)  # 9 tokens/s drafting against 10 plain at width 4
    assert gate.drafting(3)  # 9 against 8 at width 3 (together: 9 against 9, both drafting)
    assert [width_bucket(w) for w in (1, 3, 8, 9, 16, 17)] == [1, 3, 8, 16, 16, 32]


def test_steps_the_gate_keeps_plain_between_drafting_ones_keep_the_targets_text() -> None:
    """The gate measures drafting steps, then plain ones, of the same speculating requests:
    every request's text is still the target's greedy text."""
    model = ScriptedModel(_cyclic, n_ctx=256)
    chat = LocalChat(model, max_concurrent=4, keep=0)
    chat.speculator = BatchSpeculator(NgramDrafter(), DraftSizer(FixedDraftLength(3)), DraftingGate(warmup=2))
    alone = LocalChat(ScriptedModel(_cyclic, n_ctx=256), max_concurrent=4, keep=0)
    expected = [j.tokens for j in _serve(alone, speculate=False)]
    jobs = _serve(chat)
    assert [j.tokens for j in jobs] == expected
    assert set(chat.speculator.gate.rates()) >= {"4:draft", "4:plain"}  # type: ignore[union-attr]


class _Evening(FixedDraftLength):
    """Every proposal verified whole, and every ragged step evened."""

    def evened(self, rows: Sequence[int], passes: Passes) -> int | None:
        return max(rows) if len(set(rows)) > 1 else None


class _SplitModel(ScriptedModel):
    """A scripted target that runs a batch as llama.cpp with a cache per sequence does
    (``split_passes``), and records the rows each request brought to every step."""

    def __init__(self) -> None:
        super().__init__(_cyclic, n_ctx=256)
        self.steps: list[list[int]] = []

    def pass_rows(self, items: Sequence[tuple[Seq, int]]) -> list[int]:
        return split_passes([(self.batch_order(seq), n) for seq, n in items])

    def extend_many_choices(self, items: Sequence[tuple[Seq, list[int]]]) -> list[np.ndarray]:
        self.steps.append([len(ids) for _, ids in items])
        return super().extend_many_choices(items)


def test_an_evened_step_verifies_more_of_each_proposal_and_rolls_its_filler_back() -> None:
    """Where every request brings as many rows as the longest, a drafting request's rows go
    on with its own proposal, and a request with nothing to verify gets filler: the text is
    the target's greedy text all the same, also where the end token falls after filler,
    and only real draft tokens count as drafted."""
    model = _SplitModel()
    chat = LocalChat(model, max_concurrent=4, keep=0)
    speculator = BatchSpeculator(NgramDrafter(), DraftSizer(_Evening(4)))
    chat.speculator = speculator
    params = SamplingParams(temperature=0.0)
    jobs = [
        j
        for i, p in enumerate(PROMPTS)
        for j in chat.new_jobs(i, list(p), n=1, max_tokens=80, params=params, speculate=i % 2 == 0)
    ]
    waiting, running = deque(jobs), []
    while waiting or running:
        running = chat.step(waiting, running)
    plain = _serve(LocalChat(ScriptedModel(_cyclic, n_ctx=256), max_concurrent=4, keep=0), max_tokens=80)
    assert [j.tokens for j in jobs] == [j.tokens for j in plain]
    assert [j.finish for j in jobs] == ["stop"] * 4
    evened = [rows for rows in model.steps if len(rows) > 1 and len(set(rows)) == 1 and rows[0] > 1]
    assert evened  # steps whose every request brought the longest's rows
    assert all(len(set(rows)) == 1 for rows in model.steps)  # and no ragged step
    assert all(j.drafted == 0 for j in jobs[1::2])  # filler is not a draft
    assert all(0 < j.accepted <= j.drafted for j in jobs[::2])
    assert model.live_sequences == 0


class _FirstPays(_Evening):
    """Only the first request's draft is worth verifying."""

    def trim_together(
        self, proposals: Sequence[tuple[int, Hashable]], passes: Passes | None = None
    ) -> list[int]:
        return [n if i == 0 else 0 for i, (n, _) in enumerate(proposals)]


def test_a_speculator_evens_a_step_with_more_of_its_proposals() -> None:
    """The cut keeps one request's draft; evened, the other drafting request brings as many
    rows, and they are its own proposal's, as far as its room allows."""
    speculator = BatchSpeculator(NgramDrafter(), DraftSizer(_FirstPays(6)))
    first = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2]  # a copy: 3, 4, 5, 6, 7, 8
    second = [20, 21, 22, 23, 24, 25, 26, 20, 21]  # a copy: 22, 23, 24, ...
    rows = [(0, first, 4), (1, second, 6), (2, second, 2)]
    ragged = speculator.drafts(rows, others=1)
    assert ragged.width is None and ragged.drafts == [[3, 4, 5, 6], [], []]
    even = speculator.drafts(rows, others=1, passes=lambda n: list(n))
    assert even.width == 5 and even.drafts == [[3, 4, 5, 6], [22, 23, 24, 25], [22, 23]]
