"""A small but complete GGUF file for the header reader's tests: metadata of every kind
the reader skips (scalars, strings, arrays of numbers and of strings) and three tensors."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def write_tiny_gguf(path: Path) -> bytes:
    """Write the file at ``path`` and return its bytes."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_string("general.name", "tiny")
    writer.add_bool("tokenizer.ggml.add_bos_token", True)
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "a", "b", "ab", "\u00e9"])
    writer.add_array("tokenizer.ggml.scores", [0.0, 0.0, -1.0, -1.0, -2.0, -3.0])
    writer.add_tensor("token_embd.weight", np.arange(48, dtype=np.float32).reshape(6, 8))
    writer.add_tensor("blk.0.attn_q.weight", np.ones((8, 8), dtype=np.float16))
    writer.add_tensor("output_norm.weight", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()
