"""Steerable language models: logits and KV-cache control on llama.cpp and transformers."""

from coinfer.models.base import Seq, SteerableModel
from coinfer.models.chat_template import ChatTemplate, Message
from coinfer.models.load import BACKENDS, load_model
from coinfer.models.resolve import ModelSource, resolve
from coinfer.models.tree import TokenTree

__all__ = [
    "BACKENDS",
    "ChatTemplate",
    "Message",
    "ModelSource",
    "Seq",
    "SteerableModel",
    "TokenTree",
    "load_model",
    "resolve",
]
