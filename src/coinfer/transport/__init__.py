"""Authenticated streams between processes (device and cloud) and what travels on them."""

from coinfer.transport.sparse import SparseDistribution, decode, encode, sparsify

__all__ = ["SparseDistribution", "decode", "encode", "sparsify"]
