"""The one adapter from rounds to ``Response`` objects that every engine uses."""

from __future__ import annotations

from coinfer.decoding.response import Responder
from coinfer.testing import EOS, ScriptedModel


def test_rounds_become_responses_with_honest_counts_and_no_end_token() -> None:
    model = ScriptedModel(lambda prefix: 0)
    out = Responder(model.detokenize, prompt_tokens=5, eos_ids=model.eos_ids)
    first = out.step([72])  # the prompt's read: its first token
    second = out.step([105, 33, 32], drafted=3, accepted=2, phases={"forward": 0.5})
    last = out.step([0xC3, EOS, 65], drafted=2, accepted=0, finish="stop")  # a split character, then the end
    assert [r.tokens for r in (first, second, last)] == [[72], [105, 33, 32], [0xC3]]
    assert first.text + second.text + last.text == model.detokenize([72, 105, 33, 32, 0xC3])
    s = last.stats
    assert (s.prompt_tokens, s.n_tokens, s.target_forwards, s.rounds) == (5, 5, 3, 2)
    assert (s.drafted, s.accepted, last.finish_reason) == (5, 2, "stop")
    assert s.phases["forward"] == 0.5 and "detok" in s.phases  # a verification's phases, the prefill's not
    assert first.stats.n_tokens == 1 and first.finish_reason is None  # each response, the stats so far


def test_a_batch_engine_reports_what_its_own_rounds_counted() -> None:
    from coinfer.decoding.response import DecodeStats

    model = ScriptedModel(lambda prefix: 0)
    stats = DecodeStats(prompt_tokens=3)
    out = Responder(model.detokenize, stats=stats, eos_ids=model.eos_ids)
    stats.prefilled()
    stats.emitted(2)  # the batch's round counted this request's two tokens
    first = out.report([104, 0xC3], request=7)
    stats.verified(3, 1)
    stats.emitted(1)
    last = out.report([0xA9, EOS], finish="stop", request=7, extras={"run": 1})
    assert first.text + last.text == model.detokenize([104, 0xC3, 0xA9])
    assert [first.request, last.request, last.tokens, last.extras] == [7, 7, [0xA9], {"run": 1}]
    assert (last.stats.n_tokens, last.stats.rounds, first.stats.n_tokens) == (
        3,
        1,
        2,
    )  # counted once, snapshots
