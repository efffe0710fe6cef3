"""Fakes for every extension point, and helpers users can reuse in their own tests.

* ``ScriptedModel``: the steerable-model contract, greedy choices from a function of the
  prefix (``script`` builds one), byte tokens, trees included;
* ``FixedDrafter``: the drafter contract, drafts from a function or a list;
* ``ScriptedChat``: the chat-model contract, replies from a function or a list;
* ``tiny_hf_model_dir``: a tiny random transformers model with its tokenizer on disk.
"""

from coinfer.testing.chat import ScriptedChat
from coinfer.testing.drafters import FixedDrafter
from coinfer.testing.models import EOS, ScriptedModel, script
from coinfer.testing.tiny import CHATML_TEMPLATE, tiny_hf_model_dir

__all__ = [
    "CHATML_TEMPLATE",
    "EOS",
    "FixedDrafter",
    "ScriptedChat",
    "ScriptedModel",
    "script",
    "tiny_hf_model_dir",
]
