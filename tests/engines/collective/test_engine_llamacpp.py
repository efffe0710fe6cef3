"""The collective engine on the real SmolLM2 (llama.cpp): real threads, real batches."""

from __future__ import annotations

import pytest
from tests.conftest import needs_llama

from coinfer.decoding import generate
from coinfer.engines.collective.engine import CollectiveConfig, collective_generate
from coinfer.engines.collective.sources import ModelSource, NgramSource
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
        plain = generate(smollm_llama, prompt, max_tokens=12).tokens
        config = CollectiveConfig(max_tokens=12, draft_tokens=3, pipeline=pipeline, gate=None)
        run = collective_generate(smollm_llama, [ModelSource(draft), NgramSource()], [prompt], config)
        assert run.results[0].tokens == plain
        assert run.acceptance()["voted"] is not None and run.acceptance()["voted"] > 0.5  # type: ignore[operator]
        if pipeline:
            assert run.predrafts_used > 0
    finally:
        draft.close()
