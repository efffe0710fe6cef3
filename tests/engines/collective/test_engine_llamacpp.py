"""The collective engine on the real SmolLM2 (llama.cpp): real threads, real batches."""

from __future__ import annotations

import pytest
from tests.conftest import needs_llama, plain, same_up_to_a_near_tie

from coinfer.decoding import ModelDrafter, NgramDrafter
from coinfer.engines.collective import CollectiveConfig, generate
from coinfer.models import load_model
from coinfer.models.base import SteerableModel

pytestmark = needs_llama

CODE = "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n"


@pytest.mark.parametrize("pipeline", [False, True])
def test_a_second_copy_drafting_on_its_own_thread_is_kept_and_the_text_is_the_targets(
    smollm_llama: SteerableModel, pipeline: bool
) -> None:
    """The draft is another context of the same weights, so it drafts the target's own
    choices: with the pipeline they are made while the target verifies (pre-drafts).
    Every source drafts every round (no gate)."""
    draft = load_model("smollm2-135m", backend="llama.cpp", n_ctx=1024, n_seq_max=8)
    try:
        prompt = smollm_llama.chat_prompt([{"role": "user", "content": f"Repeat this code exactly:\n{CODE}"}])
        alone = plain(smollm_llama, prompt, 12).tokens
        config = CollectiveConfig(max_tokens=12, draft_tokens=3, pipeline=pipeline, gate=None)
        [out] = generate(smollm_llama, [prompt], drafts=[ModelDrafter(draft), NgramDrafter()], config=config)
        assert out.tokens == alone
        voted = out.extras["acceptance_by_draft"]["voted"]
        assert voted is not None and voted > 0.5
        if pipeline:
            assert out.extras["predrafts_used"] > 0
    finally:
        draft.close()


class _Queue:
    """Arrivals as a server's queue gives them: one request at the start, one a few rounds
    later with its own budget, and one that leaves after its first tokens."""

    def __init__(self, prompts: list[list[int]]) -> None:
        self.prompts, self.polls, self.seen = prompts, 0, 0

    def joined(self) -> list[tuple[int, list[int], int]]:
        self.polls += 1
        if self.polls == 1:
            return [(100, self.prompts[0], 12), (300, self.prompts[2], 40)]
        return [(200, self.prompts[1], 6)] if self.polls == 4 else []

    def left(self) -> set[int]:
        return {300} if self.polls >= 3 else set()


def test_requests_join_and_leave_a_running_batch_with_their_own_budgets(smollm_llama: SteerableModel) -> None:
    from coinfer.engines.collective import stream

    questions = ("What is a list in Python?", "Say hello to Ada.", "Write a long story.")
    prompts = [smollm_llama.chat_prompt([{"role": "user", "content": q}]) for q in questions]
    queue = _Queue(prompts)
    config = CollectiveConfig(max_tokens=64, draft_tokens=3, gate=None)
    tokens: dict[int, list[int]] = {}
    finish: dict[int, str | None] = {}
    for r in stream(smollm_llama, [], drafts=[NgramDrafter()], config=config, arrivals=queue):
        tokens.setdefault(r.request, []).extend(r.tokens)
        finish[r.request] = r.finish_reason
    # each is the target's own text, but where the batch's rounding flips a near-tie
    assert same_up_to_a_near_tie(smollm_llama, prompts[0], tokens[100]) and len(tokens[100]) == 12
    assert same_up_to_a_near_tie(smollm_llama, prompts[1], tokens[200]) and len(tokens[200]) == 6  # joined
    assert finish[300] == "cancelled" and 0 < len(tokens[300]) < 40
