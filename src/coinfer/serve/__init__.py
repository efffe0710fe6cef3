"""Servers that speak the OpenAI API over coinfer's models and engines."""

from coinfer.serve.openai_server import ChatServer, parse_chat_body

__all__ = ["ChatServer", "parse_chat_body"]
