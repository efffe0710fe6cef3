"""Black-box chat models: an OpenAI-compatible API, a local model answering batches at once,
and what their tokens cost."""

from coinfer.chat.base import ChatModel, ChatRequest, ChatResult, Usage
from coinfer.chat.local import LocalChat, open_local_chat
from coinfer.chat.openai_api import OpenAIChat
from coinfer.chat.pricing import DEFAULT_PRICES, Price, PriceTable, UsageLedger
from coinfer.chat.shared import SharedChat
from coinfer.chat.tools import ToolCall, Tools

__all__ = [
    "DEFAULT_PRICES",
    "ChatModel",
    "ChatRequest",
    "ChatResult",
    "LocalChat",
    "OpenAIChat",
    "Price",
    "PriceTable",
    "Usage",
    "UsageLedger",
    "SharedChat",
    "ToolCall",
    "Tools",
    "open_local_chat",
]
