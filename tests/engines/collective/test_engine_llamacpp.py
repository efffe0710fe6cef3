"""The collective engine on the real SmolLM2 (llama.cpp): real threads, real batches."""

from __future__ import annotations

import pytest
from tests.conftest import needs_llama, plain

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
