"""The language-modelling workload of ``coinfer bench dragon`` (paper 003, §7.2): perplexity
of retrieval-augmented models on text nobody here wrote.

Text: the documentation of CPython's standard library as the running interpreter carries
it (each module's docstring, then its public classes' and functions' docstrings). Rolling
windows of ``window`` tokens over the evaluation modules; the first ⅛ of a window is the
query, the rest is scored. Corpus: every module's documentation in 400-character chunks,
a window's own module left out (the other documents). The top ``2 k`` chunks are split as
in §7.2: the first half is the cloud's, the second the device's.

Systems, each scoring the same tokens:

- ``no-rag``: the model on the window alone;
- ``device-only`` / ``cloud-only``: output aggregation (REPLUG) over one side's documents;
- ``crcg``: the cloud's documents concatenated before the window (context aggregation on
  one side's corpus, as most RAG systems do);
- ``drcg``: every document of both sides concatenated before the window (context
  aggregation over the distributed corpus; DRCG/Text and DRCG/KV read the same context
  and differ only in how it gets there);
- ``dragon``: each side's REPLUG mixture, mixed by the sides' weights (``side_weight`` of
  their ``log h``): the distribution Speculative Aggregation samples, so DRDG/TW and
  DRDG/SW score the same;
- ``dragon-dynamic``: the same with dynamic weights: every 16 tokens each document's
  relevance is re-scored against the query and the text so far (``Corpus.rescorer``).

Windows alternate between two halves ("a" and "b"); nothing here is tuned on either, and
both are reported.
"""

from __future__ import annotations

import importlib
import inspect
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from coinfer.engines.dragon.aggregation import side_weight
from coinfer.engines.dragon.config import DragonConfig
from coinfer.engines.dragon.corpus import Corpus, Rescore
from coinfer.engines.dragon.side import Document
from coinfer.models.base import SteerableModel

__all__ = ["LM_SYSTEMS", "LmWorkload", "perplexities", "stdlib_documents"]

LM_SYSTEMS = ("no-rag", "device-only", "cloud-only", "crcg", "drcg", "dragon", "dragon-dynamic")
RESCORE_EVERY = DragonConfig().rescore_every  # tokens between re-scorings (the engine's default)
CORPUS_MODULES = [
    "argparse",
    "collections",
    "json",
    "logging",
    "re",
    "string",
    "textwrap",
    "typing",
    "subprocess",
    "functools",
    "dataclasses",
    "pathlib",
    "shutil",
    "tarfile",
    "zipfile",
    "csv",
    "sqlite3",
    "decimal",
    "calendar",
    "heapq",
    "difflib",
    "enum",
    "abc",
    "contextlib",
    "threading",
    "socket",
    "ssl",
    "inspect",
    "ast",
    "tokenize",
    "urllib.parse",
    "http.client",
    "configparser",
    "optparse",
    "getopt",
    "locale",
    "statistics",
    "random",
    "math",
    "itertools",
    "operator",
    "copy",
    "weakref",
    "types",
    "sched",
    "signal",
    "codecs",
    "unicodedata",
    "array",
    "base64",
    "binascii",
    "hashlib",
    "uuid",
    "io",
    "os",
    "tempfile",
    "filecmp",
    "zlib",
    "gzip",
    "bz2",
    "lzma",
    "doctest",
    "pdb",
    "timeit",
    "traceback",
    "warnings",
]
EVAL_MODULES = [
    "argparse",
    "logging",
    "re",
    "typing",
    "shutil",
    "difflib",
    "inspect",
    "ast",
    "statistics",
    "doctest",
    "pdb",
    "configparser",
    "subprocess",
    "json",
    "io",
    "os",
]
_CHUNK = 64  # tokens scored per forward


def stdlib_documents(modules: Sequence[str] = CORPUS_MODULES) -> list[tuple[str, str]]:
    """(module name, its documentation) for each module this interpreter has."""
    out = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        parts = [inspect.getdoc(module) or ""]
        for attr in sorted(a for a in dir(module) if not a.startswith("_")):
            with warnings.catch_warnings():  # a deprecated alias warns when touched
                warnings.simplefilter("ignore", DeprecationWarning)
                obj = getattr(module, attr)
            public = inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj)
            if public and getattr(obj, "__module__", None) == name and (doc := inspect.getdoc(obj)):
                parts.append(f"{attr}: {doc}")
        text = "\n\n".join(p for p in parts if p)
        if text:
            out.append((name, text))
    return out


@dataclass(frozen=True)
class Window:
    module: str
    half: str
    ids: list[int]  # the whole window
    query: int  # its first ``query`` tokens are the query; the rest is scored


@dataclass(frozen=True, kw_only=True)
class LmWorkload:
    window: int = 256
    windows: int = 16
    top_k: int = 2  # documents per side
    eval_modules: Sequence[str] = tuple(EVAL_MODULES)
    corpus_modules: Sequence[str] = tuple(CORPUS_MODULES)


def windows(model: SteerableModel, docs: dict[str, str], work: LmWorkload) -> list[Window]:
    """Rolling windows over the evaluation modules, round-robin until ``windows``."""
    per_module = {m: model.tokenize(docs[m]) for m in work.eval_modules if m in docs}
    out: list[Window] = []
    offset = 0
    while len(out) < work.windows and any(len(t) >= offset + work.window for t in per_module.values()):
        for module, ids in per_module.items():
            if len(out) < work.windows and len(ids) >= offset + work.window:
                half = "ab"[len(out) % 2]
                out.append(Window(module, half, ids[offset : offset + work.window], max(1, work.window // 8)))
        offset += work.window
    return out


def continuation_logprobs(model: SteerableModel, prefix: list[int], window: Window) -> np.ndarray:
    """log p of each scored token of ``window`` after ``prefix`` (the documents), as the
    model reads them: (len(ids) - query,)."""
    seq = model.new_sequence()
    try:
        ids = window.ids
        rows = [model.extend(seq, [*prefix, *ids[: window.query]], last_only=True)[-1:]]
        for start in range(window.query, len(ids) - 1, _CHUNK):
            rows.append(model.extend(seq, ids[start : min(start + _CHUNK, len(ids) - 1)]))
        logits = np.concatenate(rows).astype(np.float64)
    finally:
        model.release(seq)
    top = logits.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    targets = np.array(ids[window.query :])
    return logits[np.arange(len(targets)), targets] - log_z


def replug(doc_logps: np.ndarray, relevance: np.ndarray) -> tuple[np.ndarray, float]:
    """One side's mixture of its documents' token log-probabilities (n_docs, T) with the
    softmax of their relevance as weights, and the side's log h."""
    r = np.asarray(relevance, dtype=np.float64)
    log_h = float(np.logaddexp.reduce(r))
    weighted = doc_logps + (r - log_h)[:, None]
    return np.logaddexp.reduce(weighted, axis=0), log_h


def score_window(
    model: SteerableModel,
    window: Window,
    device: list[Document],
    cloud: list[Document],
    rescore: Rescore | None = None,
) -> dict[str, np.ndarray]:
    """Every system's log-probabilities of the window's scored tokens."""

    def context(docs: Sequence[Document]) -> list[int]:
        return model.text_prompt("".join(f"{d.text}\n\n" for d in docs))

    per_doc = {id(d): continuation_logprobs(model, context([d]), window) for d in (*cloud, *device)}

    def side(docs: list[Document]) -> tuple[np.ndarray, float]:
        return replug(np.stack([per_doc[id(d)] for d in docs]), np.array([d.relevance for d in docs]))

    (p_dev, h_dev), (p_cloud, h_cloud) = side(device), side(cloud)
    eta = side_weight(h_dev, h_cloud)  # the device's weight
    dynamic = {}
    if rescore is not None:
        dynamic["dragon-dynamic"] = _dynamic(model, window, (device, cloud), per_doc, rescore)
    return dynamic | {
        "no-rag": continuation_logprobs(model, model.text_prompt(""), window),
        "device-only": p_dev,
        "cloud-only": p_cloud,
        "crcg": continuation_logprobs(model, context(cloud), window),
        "drcg": continuation_logprobs(model, context([*cloud, *device]), window),
        "dragon": np.logaddexp(math.log(eta) + p_dev, math.log1p(-eta) + p_cloud),
    }


def _dynamic(
    model: SteerableModel,
    window: Window,
    sides: tuple[list[Document], list[Document]],
    per_doc: dict[int, np.ndarray],
    rescore: Rescore,
) -> np.ndarray:
    """DRAGON with dynamic weights: position t's documents weighted by their relevance
    re-scored at the last multiple of ``RESCORE_EVERY`` before t, as the engine's sides do."""
    out = []
    for start in range(0, len(window.ids) - window.query, RESCORE_EVERY):
        text = model.detokenize(window.ids[window.query : window.query + start])
        mixed = []
        for docs in sides:
            logps = np.stack([per_doc[id(d)][start : start + RESCORE_EVERY] for d in docs])
            relevance = rescore(docs, text) if start else np.array([d.relevance for d in docs])
            mixed.append(replug(logps, relevance))
        (p_dev, h_dev), (p_cloud, h_cloud) = mixed
        eta = side_weight(h_dev, h_cloud)
        out.append(np.logaddexp(math.log(eta) + p_dev, math.log1p(-eta) + p_cloud))
    return np.concatenate(out)


def query_text(model: SteerableModel, window: Window) -> str:
    return model.detokenize(window.ids[: window.query])


def retrieve_split(
    corpus: Corpus, window: Window, model: SteerableModel, top_k: int
) -> tuple[list[Document], list[Document]]:
    """(device's, cloud's) documents: the top 2 k chunks not from the window's own module;
    the first half the cloud's, the second the device's (§7.2)."""
    found = corpus.retrieve(query_text(model, window), 2 * top_k + 40)
    others = [d for d in found if not d.name.startswith(f"{window.module}@")][: 2 * top_k]
    return others[top_k:], others[:top_k]


def perplexities(
    model: SteerableModel, work: LmWorkload, log: Callable[[str], None] = lambda _: None
) -> dict[str, Any]:
    """Perplexity per system, overall and per half, and the windows scored."""
    docs = dict(stdlib_documents(sorted({*work.corpus_modules, *work.eval_modules})))
    corpus = Corpus(list(docs.items()))
    scored: dict[str, dict[str, list[np.ndarray]]] = {h: {s: [] for s in LM_SYSTEMS} for h in "ab"}
    rows = []
    for i, window in enumerate(windows(model, docs, work)):
        log(f"lm window {i + 1}: {window.module} ({window.half})")
        device, cloud = retrieve_split(corpus, window, model, work.top_k)
        rescore = corpus.rescorer(query_text(model, window))
        logps = score_window(model, window, device, cloud, rescore)
        for system, values in logps.items():
            scored[window.half][system].append(values)
        rows.append(
            {
                "module": window.module,
                "half": window.half,
                "scored_tokens": len(window.ids) - window.query,
                "device_documents": [d.name for d in device],
                "cloud_documents": [d.name for d in cloud],
                "perplexity": {s: round(math.exp(-float(v.mean())), 4) for s, v in logps.items()},
            }
        )

    def ppl(halves: str) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for s in LM_SYSTEMS:
            values = [v for h in halves for v in scored[h][s]]
            out[s] = round(math.exp(-float(np.concatenate(values).mean())), 4) if values else None
        return out

    return {"perplexity": ppl("ab"), "perplexity_by_half": {h: ppl(h) for h in "ab"}, "windows": rows}
