"""Chunking and retrieval over the user's documents: BM25 and dense embeddings."""

from coinfer.retrieval.base import Chunk, Retriever, chunk_documents
from coinfer.retrieval.bm25 import BM25Retriever
from coinfer.retrieval.dense import DenseRetriever

__all__ = ["BM25Retriever", "Chunk", "DenseRetriever", "Retriever", "chunk_documents"]
