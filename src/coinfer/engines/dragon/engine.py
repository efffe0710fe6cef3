"""DRAGON's engine (paper 003): retrieval-augmented generation by output aggregation.

Every retrieved document is read with the question in a sequence of its own, and each
next token comes from the mixture of the documents' next-token distributions, weighted
by the softmax of their relevance (REPLUG; §2.2). With only the device's documents
this is device-only RAG (``coinfer rag ask`` without ``--cloud``); the cloud's documents
join the same mixture through Speculative Aggregation.

Three layers, as every engine: ``generate_tokens`` yields one token at a time, ``stream``
turns them into ``Response`` objects, ``generate`` blocks.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

from coinfer.decoding.detok import IncrementalDetokenizer
from coinfer.decoding.response import DecodeStats, Response, collect
from coinfer.decoding.sampling import PositionDraws
from coinfer.decoding.speculative import window_full
from coinfer.engines.dragon.config import DragonConfig
from coinfer.engines.dragon.side import Document, RagSide
from coinfer.models.base import SteerableModel

__all__ = ["document_prompt", "generate", "generate_tokens", "stream"]

DEVICE, CLOUD = 0, 1


def document_prompt(
    model: SteerableModel, question: str, style: str = "chat"
) -> Callable[[Document], list[int]]:
    """How a document and the question become one sequence's prompt: the document first
    (so its cache can be reused across questions), then the question. ``chat``: the
    document as the system message and the question as the user's, in the model's chat
    template; ``text``: the document's text, a blank line, then the question's (language
    modelling)."""

    def chat(doc: Document) -> list[int]:
        return model.user_prompt(
            question, system=f"Use this document where it helps to answer.\n\n{doc.text}"
        )

    def text(doc: Document) -> list[int]:
        return model.text_prompt(f"{doc.text}\n\n{question}")

    return chat if style == "chat" else text


def generate_tokens(
    model: SteerableModel,
    question: str,
    *,
    documents: Sequence[Document],
    config: DragonConfig = DragonConfig(),  # noqa: B008  (frozen, so a shared default is safe)
    prompt_style: str = "chat",
) -> Iterator[tuple[list[int], str | None]]:
    """Yield the device's tokens (each drawn from the mixture over ``documents``) with why
    generation ends there (or None): "stop" at an end-of-generation token (which is not
    output), "length" at ``max_tokens`` or when a document's sequence fills the window."""
    seed = PositionDraws(config.sampling.seed if config.seed is None else config.seed).seed
    side = RagSide(
        model,
        documents,
        document_prompt(model, question, prompt_style),
        sampling=config.sampling,
        seed=seed,
        side=DEVICE,
        transfer_top_p=config.transfer_top_p,
        transfer_max_ids=config.transfer_max_ids,
    )
    longest = max(len(p) for p in side.prefixes)
    try:
        side.start()
        for produced in range(1, config.max_tokens + 1):
            draft = side.draft()
            if draft.token in model.eos_ids:
                yield [], "stop"
                return
            full = produced >= config.max_tokens or window_full(longest + produced, model.n_ctx)
            yield [draft.token], "length" if full else None
            if full:
                return
            side.advance(draft.token)
    finally:
        side.close()


def stream(
    model: SteerableModel,
    question: str,
    *,
    documents: Sequence[Document],
    config: DragonConfig = DragonConfig(),  # noqa: B008
    prompt_style: str = "chat",
) -> Generator[Response, None, None]:
    """One ``Response`` per token; ``extras`` names the documents and the side."""
    stats = DecodeStats()
    detok = IncrementalDetokenizer(model.detokenize)
    extras: dict[str, Any] = {"mode": "device-only", "documents": [d.name for d in documents]}
    for tokens, finished in generate_tokens(
        model, question, documents=documents, config=config, prompt_style=prompt_style
    ):
        if stats.target_forwards == 0:
            stats.prefilled()
        else:
            stats.verified(0, 0)
        stats.emitted(len(tokens))
        text = "".join(detok.push(t) for t in tokens) + (detok.flush() if finished else "")
        yield Response(text, tokens, stats.snapshot(), finished, extras=dict(extras))


def generate(
    model: SteerableModel,
    question: str,
    *,
    documents: Sequence[Document],
    config: DragonConfig = DragonConfig(),  # noqa: B008
    prompt_style: str = "chat",
) -> Response:
    """Generate to the end: one ``Response`` with the whole text and every token."""
    return collect(
        stream(model, question, documents=documents, config=config, prompt_style=prompt_style),
        model.detokenize,
    )
