"""DRAGON (paper 003): device and cloud each retrieve from their own corpus and decode;
their next-token distributions are mixed by Speculative Aggregation.

    from coinfer.engines.dragon import Corpus, DragonConfig, generate
    docs = Corpus(read_corpus("notes/")).retrieve(question, 2)
    response = generate(model, question, documents=docs, config=DragonConfig())
"""

from coinfer.engines.dragon.config import DragonConfig
from coinfer.engines.dragon.corpus import Corpus, read_corpus
from coinfer.engines.dragon.engine import Documents, generate, generate_tokens, open_channel, stream
from coinfer.engines.dragon.remote import CloudLink, CloudService
from coinfer.engines.dragon.side import Document, Draft, RagSide, document_prompt

__all__ = [
    "CloudLink",
    "CloudService",
    "Corpus",
    "Document",
    "Documents",
    "Draft",
    "DragonConfig",
    "RagSide",
    "document_prompt",
    "generate",
    "generate_tokens",
    "open_channel",
    "read_corpus",
    "stream",
]
