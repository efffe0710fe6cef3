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
