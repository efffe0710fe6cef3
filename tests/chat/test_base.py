"""The chat contract's values: usage arithmetic and request validation."""

from __future__ import annotations

import pytest

from coinfer.chat import ChatRequest, Usage
from coinfer.errors import ConfigError


def test_usage_adds_up_and_remembers_estimates() -> None:
    total = Usage(10, 2, 1) + Usage(5, 3, 1, estimated=True)
    assert (total.prompt_tokens, total.completion_tokens, total.calls, total.total_tokens) == (15, 5, 2, 20)
    assert total.estimated and not (Usage(1, 1, 1) + Usage(1, 1, 1)).estimated


@pytest.mark.parametrize(
    "kwargs",
    [{"messages": []}, {"n": 0}, {"max_tokens": 0}, {"temperature": -1.0}, {"messages": [{"role": "x"}]}],
)
def test_bad_requests_are_config_errors(kwargs: dict) -> None:  # type: ignore[type-arg]
    args = {"messages": [{"role": "user", "content": "hi"}], **kwargs}
    with pytest.raises(ConfigError):
        ChatRequest(**args)
