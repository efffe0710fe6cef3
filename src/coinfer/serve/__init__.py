"""Servers that speak the OpenAI API over coinfer's models and engines."""

from coinfer.serve.openai_server import ChatServer, Server
from coinfer.serve.schemas import parse_chat_body

__all__ = ["ChatServer", "Server", "parse_chat_body"]
